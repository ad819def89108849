//! What every table must hold after a schedule, and the documented exceptions that allow
//! anything else. Pure: the executor hands over what it produced, what it did to the
//! broker, what the jobs recorded as exceptions (`exceptions.jsonl`) and what the tables
//! hold; [`verify`] compares exactly.
//!
//! The rule: every record produced to a job's topic is in that job's table exactly once
//! (bad records too, once the final replay has repaired them), and in no other table.
//! The only exceptions are the ones the job names, each a range of one log's offsets:
//! - `lost`: the records there are not in the table. Allowed only where the schedule
//!   made records unreadable: DeleteRecords below them, or their topic deleted. A range
//!   whose reason says "possibly" allows the record once or not at all;
//! - `possibly_duplicated`: the records there are in the table once or twice. Allowed
//!   only when the schedule lost a write stream (a finalized stream) or made a logged
//!   batch unreadable.

use super::schedule::Job;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One record produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Its id (the table's `id` column once written).
    pub id: u64,
    /// The job whose topic it went to.
    pub job: Job,
    /// The topic's id when it was produced (which log).
    pub topic_id: String,
    /// Partition and offset.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// A record the job dead-letters (the replay's UDF repairs it).
    pub bad: bool,
    /// For the CDC job: the change it carries (its sequence number is its id).
    pub change: Option<Change>,
}

/// A keyed change of the CDC job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The primary key.
    pub key: i64,
    /// A delete (else an upsert).
    pub delete: bool,
}

/// What the schedule did that can make records unreadable or written twice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Excuses {
    /// (job, topic id, partition) → the offset DeleteRecords deleted below (the highest).
    pub deleted: BTreeMap<(Job, String, i32), i64>,
    /// Topic ids of topics deleted (and created again).
    pub recreated: BTreeSet<String>,
    /// A write stream of the job's table was finalized under it.
    pub stream_gone: BTreeSet<Job>,
    /// Each job's topic ids, oldest first (the logs its topic has had).
    pub lineage: BTreeMap<Job, Vec<String>>,
}

/// One exception a job recorded (`exceptions.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// The job.
    pub job: Job,
    /// `lost` or `possibly_duplicated`.
    pub kind: String,
    /// The log.
    pub topic_id: Option<String>,
    /// Partition.
    pub partition: i32,
    /// First offset.
    pub from: i64,
    /// Past the last (None: to the end).
    pub to: Option<i64>,
    /// Why.
    pub why: String,
    /// For a topic recreated: the topic id the job found in its place.
    pub replaced_by: Option<String>,
}

impl Exception {
    fn covers(&self, r: &Produced, excuses: &Excuses) -> bool {
        self.job == r.job
            && (self.in_between(r, excuses)
                || (self.topic_id.as_deref().is_none_or(|t| t == r.topic_id)
                    && self.partition == r.partition
                    && r.offset >= self.from
                    && self.to.is_none_or(|to| r.offset < to)))
    }

    /// Whether `r` was in a log its topic had between the one this exception names and
    /// the one the job found instead: created and deleted while the job was not running,
    /// so never seen by it (any partition).
    fn in_between(&self, r: &Produced, excuses: &Excuses) -> bool {
        let (Some(old), Some(new)) = (&self.topic_id, &self.replaced_by) else { return false };
        let Some(ids) = excuses.lineage.get(&self.job) else { return false };
        let at = |id: &str| ids.iter().position(|i| i == id);
        match (at(old), at(new), at(&r.topic_id)) {
            (Some(a), Some(b), Some(x)) => a < x && x < b,
            _ => false,
        }
    }

    fn lost_for_sure(&self) -> bool {
        self.kind == "lost" && !self.why.starts_with("possibly")
    }
}

/// How many times each record may appear in its job's table.
fn allowed(r: &Produced, exceptions: &[Exception], excuses: &Excuses) -> (u32, u32) {
    let mine = exceptions.iter().filter(|e| e.covers(r, excuses));
    let (mut lo, mut hi) = (1, 1);
    for e in mine {
        match (e.kind.as_str(), e.lost_for_sure()) {
            ("lost", true) => (lo, hi) = (0, 0),
            ("lost", false) => lo = 0,
            _ => hi = hi.max(2),
        }
    }
    (lo, hi)
}

/// Why an exception the job recorded is not one the schedule allows, if so.
fn unjustified(e: &Exception, excuses: &Excuses) -> Option<String> {
    let id = e.topic_id.clone().unwrap_or_default();
    let deleted_to = excuses.deleted.get(&(e.job, id.clone(), e.partition)).copied();
    let recreated = excuses.recreated.contains(&id);
    let ok = match e.kind.as_str() {
        "lost" if e.why == "deleted before it was read" => deleted_to.is_some_and(|d| e.to.is_some_and(|to| to <= d)),
        "lost" if e.why == "topic recreated" => recreated,
        "lost" => recreated || deleted_to.is_some(),
        "possibly_duplicated" => excuses.stream_gone.contains(&e.job) || recreated || deleted_to.is_some(),
        _ => false,
    };
    (!ok).then(|| format!("{e:?} has no cause in the schedule ({excuses:?})"))
}

/// [`verify`] for the jobs that count rows, [`verify_cdc`] for each CDC job's state.
pub fn verify_all(
    produced: &[Produced],
    tables: &HashMap<Job, HashMap<u64, u32>>,
    states: &BTreeMap<Job, BTreeMap<i64, i64>>,
    exceptions: &[Exception],
    excuses: &Excuses,
) -> Result<(), Vec<String>> {
    let mut errors = verify(produced, tables, exceptions, excuses).err().unwrap_or_default();
    for (job, state) in states {
        errors.extend(verify_cdc(*job, produced, state, exceptions, excuses));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Compare a CDC job's table (key → the version of its row) with the model: each key's
/// final state is its newest change's (an upsert's version, or no row after a delete).
/// A change named lost for sure is not applied; one named possibly lost may or may not
/// be, so a key whose newest changes are uncertain may end in any of their states.
pub fn verify_cdc(
    job: Job,
    produced: &[Produced],
    state: &BTreeMap<i64, i64>,
    exceptions: &[Exception],
    excuses: &Excuses,
) -> Vec<String> {
    let mut by_key: BTreeMap<i64, Vec<(&Produced, Change)>> = BTreeMap::new();
    for r in produced.iter().filter(|r| r.job == job) {
        if let Some(c) = r.change {
            by_key.entry(c.key).or_default().push((r, c));
        }
    }
    let mut errors = Vec::new();
    for (key, changes) in &by_key {
        let outcome = |r: &Produced, c: &Change| if c.delete { None } else { Some(r.id as i64) };
        let (mut certain, mut uncertain) = (None::<(&Produced, Change)>, Vec::new());
        for (r, c) in changes {
            match allowed(r, exceptions, excuses) {
                (0, 0) => {}
                (0, _) => uncertain.push((*r, *c)),
                _ if certain.is_none_or(|(m, _)| m.id < r.id) => certain = Some((*r, *c)),
                _ => {}
            }
        }
        let floor = certain.map_or(0, |(r, _)| r.id);
        let mut ok: Vec<Option<i64>> = vec![certain.and_then(|(r, c)| outcome(r, &c))];
        ok.extend(uncertain.iter().filter(|(r, _)| r.id > floor).map(|(r, c)| outcome(r, c)));
        let got = state.get(key).copied();
        if !ok.contains(&got) {
            errors.push(format!("CDC key {key} of {job:?} ends as {got:?} (a row's version, None: no row); the model allows {ok:?}; changes {changes:?}"));
        }
    }
    for (key, v) in state {
        if !by_key.contains_key(key) {
            errors.push(format!("CDC table of {job:?} holds key {key} (version {v}), which no change named"));
        }
    }
    errors
}

/// Compare the tables with the model: every difference, or none.
pub fn verify(
    produced: &[Produced],
    tables: &HashMap<Job, HashMap<u64, u32>>,
    exceptions: &[Exception],
    excuses: &Excuses,
) -> Result<(), Vec<String>> {
    let mut errors: Vec<String> = exceptions.iter().filter_map(|e| unjustified(e, excuses)).collect();
    let by_id: HashMap<u64, &Produced> = produced.iter().map(|r| (r.id, r)).collect();
    for r in produced.iter().filter(|r| r.change.is_none()) {
        let n = tables.get(&r.job).and_then(|t| t.get(&r.id)).copied().unwrap_or(0);
        let (lo, hi) = allowed(r, exceptions, excuses);
        if n < lo || n > hi {
            errors.push(format!(
                "record {} ({:?}, log {} {}@{}, bad={}) is in the table {n} times; {lo}..={hi} allowed",
                r.id, r.job, r.topic_id, r.partition, r.offset, r.bad
            ));
        }
    }
    for (job, t) in tables {
        for (id, n) in t {
            match by_id.get(id) {
                None => errors.push(format!("table of {job:?} holds id {id} ({n} times), which was never produced")),
                Some(r) if r.job != *job => {
                    errors.push(format!("table of {job:?} holds id {id} of job {:?} ({n} times)", r.job))
                }
                Some(_) => {}
            }
        }
    }
    errors.sort();
    errors.dedup();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, offset: i64) -> Produced {
        Produced { id, job: Job::A, topic_id: "t1".into(), partition: 0, offset, bad: false, change: None }
    }

    fn change(id: u64, key: i64, delete: bool) -> Produced {
        Produced { job: Job::C, change: Some(Change { key, delete }), ..rec(id, id as i64) }
    }

    #[test]
    fn a_cdc_key_ends_in_its_newest_changes_state_unless_an_exception_names_it() {
        // Key 1: upsert 1, upsert 3 (arrives first), delete 2: ends at version 3.
        // Key 2: upsert 4, delete 5: no row.
        let p = [change(3, 1, false), change(1, 1, false), change(2, 1, true), change(4, 2, false), change(5, 2, true)];
        let why = Excuses::default();
        assert!(verify_cdc(Job::C, &p, &BTreeMap::from([(1, 3)]), &[], &why).is_empty());
        assert!(!verify_cdc(Job::C, &p, &BTreeMap::from([(1, 1)]), &[], &why).is_empty(), "an older change won");
        assert!(!verify_cdc(Job::C, &p, &BTreeMap::from([(1, 3), (2, 4)]), &[], &why).is_empty(), "a delete lost");
        assert!(!verify_cdc(Job::C, &p, &BTreeMap::from([(1, 3), (9, 1)]), &[], &why).is_empty(), "an unknown key");
        // Change 5 (offset 5) possibly lost: key 2 may keep version 4.
        let mut maybe = lost(5, Some(6), "possibly lost: an abandoned batch, partly landed");
        maybe.job = Job::C;
        let mut why = Excuses::default();
        why.deleted.insert((Job::C, "t1".into(), 0), 6);
        assert!(verify_cdc(Job::C, &p, &BTreeMap::from([(1, 3), (2, 4)]), &[maybe.clone()], &why).is_empty());
        assert!(verify_cdc(Job::C, &p, &BTreeMap::from([(1, 3)]), &[maybe], &why).is_empty());
    }

    fn tables(counts: &[(u64, u32)]) -> HashMap<Job, HashMap<u64, u32>> {
        HashMap::from([(Job::A, counts.iter().copied().collect())])
    }

    fn lost(from: i64, to: Option<i64>, why: &str) -> Exception {
        Exception {
            job: Job::A,
            kind: "lost".into(),
            topic_id: Some("t1".into()),
            partition: 0,
            from,
            to,
            why: why.into(),
            replaced_by: None,
        }
    }

    #[test]
    fn every_record_once_passes_and_a_missing_or_doubled_one_fails() {
        let p = [rec(1, 0), rec(2, 1)];
        assert!(verify(&p, &tables(&[(1, 1), (2, 1)]), &[], &Excuses::default()).is_ok());
        let e = verify(&p, &tables(&[(1, 1)]), &[], &Excuses::default()).unwrap_err();
        assert!(e[0].contains("record 2") && e[0].contains("0 times"), "{e:?}");
        let e = verify(&p, &tables(&[(1, 2), (2, 1)]), &[], &Excuses::default()).unwrap_err();
        assert!(e[0].contains("2 times"), "{e:?}");
        let e = verify(&p, &tables(&[(1, 1), (2, 1), (9, 1)]), &[], &Excuses::default()).unwrap_err();
        assert!(e[0].contains("never produced"), "{e:?}");
    }

    #[test]
    fn a_loss_is_allowed_only_where_it_is_named_and_caused() {
        let p = [rec(1, 0), rec(2, 1), rec(3, 2)];
        let ex = [lost(0, Some(2), "deleted before it was read")];
        let mut why = Excuses::default();
        why.deleted.insert((Job::A, "t1".into(), 0), 2);
        assert!(verify(&p, &tables(&[(3, 1)]), &ex, &why).is_ok());
        // Named lost for sure, but in the table: fails.
        assert!(verify(&p, &tables(&[(1, 1), (3, 1)]), &ex, &why).is_err());
        // Named, but nothing in the schedule deleted it: fails.
        assert!(verify(&p, &tables(&[(3, 1)]), &ex, &Excuses::default()).is_err());
        // A possible loss allows either.
        let maybe = [lost(0, Some(2), "possibly lost: an abandoned batch, partly landed")];
        assert!(verify(&p, &tables(&[(1, 1), (3, 1)]), &maybe, &why).is_ok());
        assert!(verify(&p, &tables(&[(3, 1)]), &maybe, &why).is_ok());
    }

    #[test]
    fn a_duplicate_is_allowed_only_in_a_named_range_with_a_lost_stream() {
        let p = [rec(1, 0)];
        let dup = [Exception { kind: "possibly_duplicated".into(), why: "stream gone".into(), ..lost(0, Some(1), "") }];
        let mut why = Excuses::default();
        why.stream_gone.insert(Job::A);
        assert!(verify(&p, &tables(&[(1, 2)]), &dup, &why).is_ok());
        assert!(verify(&p, &tables(&[(1, 2)]), &dup, &Excuses::default()).is_err());
        assert!(verify(&p, &tables(&[(1, 2)]), &[], &why).is_err());
    }

    #[test]
    fn another_jobs_record_in_a_table_fails() {
        let b = Produced { job: Job::B, ..rec(5, 0) };
        let t = HashMap::from([(Job::A, HashMap::from([(5, 1)])), (Job::B, HashMap::from([(5, 1)]))]);
        let e = verify(&[b], &t, &[], &Excuses::default()).unwrap_err();
        assert!(e.iter().any(|x| x.contains("of job B")), "{e:?}");
    }

    #[test]
    fn a_recreation_names_the_logs_in_between_that_the_job_never_saw() {
        // t1 recreated as t2, t2 recreated as t3 while the job was stopped: the job names
        // t1 from its position, replaced by t3; t2's records are lost with it.
        let mut mid = rec(2, 0);
        mid.topic_id = "t2".into();
        let mut last = rec(3, 0);
        last.topic_id = "t3".into();
        let p = [rec(1, 0), mid, last];
        let mut why = Excuses::default();
        why.recreated.extend(["t1".to_string(), "t2".to_string()]);
        why.lineage.insert(Job::A, vec!["t1".into(), "t2".into(), "t3".into()]);
        let mut ex = lost(1, None, "topic recreated");
        assert!(verify(&p, &tables(&[(1, 1), (3, 1)]), std::slice::from_ref(&ex), &why).is_err(), "t2 not named");
        ex.replaced_by = Some("t3".into());
        assert!(verify(&p, &tables(&[(1, 1), (3, 1)]), std::slice::from_ref(&ex), &why).is_ok());
        // The new log is not in between: its records must still be there.
        assert!(verify(&p, &tables(&[(1, 1)]), &[ex], &why).is_err());
    }
}
