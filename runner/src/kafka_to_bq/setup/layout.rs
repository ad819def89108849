//! Where a kafka-to-bq job keeps each topic's checkpoint, and where a topic the job had
//! not read before starts.
//!
//! One layout for one topic and for many: a job `J` that reads one topic `T` keeps its
//! pipeline's files in `J/`; a job of several topics keeps `T`'s in `J.T/`, and `J/` holds
//! the job's lock, control socket and [`KNOWN_FILE`]. When a job switches between the
//! two, the topic's files move ([`to_list`], [`to_one`]) before anything is read, so the
//! topic resumes from its own commit log: adding a topic to a one-topic job, or going
//! back, never restarts or duplicates it, and a topic removed and later added back
//! resumes from `J.T/`. A move is restartable: `job.json` moves last, so a crash in the
//! middle is finished by the next start.
//!
//! The start rule (`docs/exactly-once.md`, "Where reading starts"): the topics of a job's
//! first start begin where `kafkaReadOffset` says; every topic that joins later (found
//! by a pattern while running, created while the job was down, or added to the list)
//! begins at its earliest offset. Which topics the job knows, and each one's rule, is
//! made durable in `J/topics.json` before the topic's pipeline starts.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The job's known topics, in the job's own directory.
pub const KNOWN_FILE: &str = "topics.json";

/// Files of the job itself, never of one topic's pipeline: they stay put in a move.
const JOB_FILES: [&str; 4] =
    ["LOCK", crate::control::record::RECORD_FILE, crate::control::record::SOCKET_FILE, KNOWN_FILE];

/// Where a topic's pipeline begins when it has no checkpoint of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartRule {
    /// Where `kafkaReadOffset` (or the consumer group) says: the job's first start.
    Initial,
    /// At the earliest offset: the topic joined a job that was already reading.
    Earliest,
}

/// The topics a job of several topics has started, each with its rule.
pub type Known = BTreeMap<String, StartRule>;

/// The directory of `topic`'s pipeline in a job of several topics.
pub fn topic_dir(root: &Path, job: &str, topic: &str) -> PathBuf {
    root.join(format!("{job}.{topic}"))
}

/// The job's known topics; None before its first start. Topics that have a checkpoint
/// from a version without this file count as known.
pub fn read_known(root: &Path, job: &str) -> io::Result<Option<Known>> {
    match std::fs::read(root.join(job).join(KNOWN_FILE)) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(older_checkpoints(root, job)),
        Err(e) => Err(e),
    }
}

fn older_checkpoints(root: &Path, job: &str) -> Option<Known> {
    let prefix = format!("{job}.");
    let known: Known = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix).map(str::to_string))
        .filter(|t| topic_dir(root, job, t).join(crate::control::identity::FILE).exists())
        .map(|t| (t, StartRule::Initial))
        .collect();
    (!known.is_empty()).then_some(known)
}

/// The rule for `topic`: its recorded one, else `Initial` at the job's first start and
/// `Earliest` once the job has started before.
pub fn rule_for(known: Option<&Known>, topic: &str) -> StartRule {
    match known {
        None => StartRule::Initial,
        Some(k) => k.get(topic).copied().unwrap_or(StartRule::Earliest),
    }
}

/// Record `known` durably (before the pipelines it names start).
pub fn write_known(root: &Path, job: &str, known: &Known) -> io::Result<()> {
    crate::kafka::starts::write_durably(&root.join(job), KNOWN_FILE, &serde_json::to_vec_pretty(known)?)
}

/// The topic of the one-topic checkpoint in `dir`, if there is one.
fn checkpoint_topic(dir: &Path) -> io::Result<Option<String>> {
    #[derive(Deserialize)]
    struct Id {
        topic: String,
    }
    match std::fs::read(dir.join(crate::control::identity::FILE)) {
        Ok(b) => serde_json::from_slice::<Id>(&b)
            .map(|i| Some(i.topic))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", dir.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A job that read one topic now reads several: move that topic's checkpoint from `J/`
/// to `J.T/` (the caller holds `J`'s lock). Returns the topic moved. A checkpoint for a
/// topic the list no longer names moves too, so adding it back resumes.
pub fn to_list(root: &Path, job: &str) -> io::Result<Option<String>> {
    let from = root.join(job);
    let Some(topic) = checkpoint_topic(&from)? else { return Ok(None) };
    let to = topic_dir(root, job, &topic);
    if to.join(crate::control::identity::FILE).exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "both {} and {} hold a checkpoint for topic {topic}; remove the stale one",
                from.display(),
                to.display()
            ),
        ));
    }
    move_pipeline(&from, &to)?;
    tracing::info!(job, topic, to = %to.display(), "the job now reads several topics: its topic's checkpoint moved");
    Ok(Some(topic))
}

/// A job that read several topics now reads one, `topic`: move its checkpoint from
/// `J.T/` back to `J/` (the caller holds `J`'s lock). Returns whether it moved.
pub fn to_one(root: &Path, job: &str, topic: &str) -> io::Result<bool> {
    let (from, to) = (topic_dir(root, job, topic), root.join(job));
    if checkpoint_topic(&to)?.is_some() || !from.join(crate::control::identity::FILE).exists() {
        return Ok(false);
    }
    move_pipeline(&from, &to)?;
    std::fs::remove_dir_all(&from)?;
    tracing::info!(job, topic, "the job now reads one topic: its checkpoint moved back");
    Ok(true)
}

/// Move every pipeline file from `from` to `to`, `job.json` last.
fn move_pipeline(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    let id = crate::control::identity::FILE;
    let mut names: Vec<_> = std::fs::read_dir(from)?
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_str().is_none_or(|n| !JOB_FILES.contains(&n) && n != id))
        .collect();
    names.push(id.into());
    for n in names {
        match std::fs::rename(from.join(&n), to.join(&n)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => r?,
        }
    }
    for d in [from, to] {
        File::open(d)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(dir: &Path, topic: &str) {
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        std::fs::write(dir.join("job.json"), format!("{{\"topic\":\"{topic}\"}}")).unwrap();
        std::fs::write(dir.join("shard-0"), b"log").unwrap();
        std::fs::write(dir.join("LOCK"), b"").unwrap();
    }

    #[test]
    fn a_topic_checkpoint_moves_to_the_list_layout_and_back() {
        let root = tempfile::tempdir().unwrap();
        pipeline(&root.path().join("j"), "a");
        assert_eq!(to_list(root.path(), "j").unwrap().as_deref(), Some("a"));
        let t = topic_dir(root.path(), "j", "a");
        assert!(t.join("shard-0").exists() && t.join("schemas").is_dir() && t.join("job.json").exists());
        assert!(root.path().join("j/LOCK").exists() && !root.path().join("j/job.json").exists());
        assert_eq!(to_list(root.path(), "j").unwrap(), None, "nothing left to move");
        assert!(to_one(root.path(), "j", "a").unwrap());
        assert!(root.path().join("j/shard-0").exists() && !t.exists());
        assert!(!to_one(root.path(), "j", "b").unwrap(), "no checkpoint for b");
    }

    #[test]
    fn an_interrupted_move_is_finished_by_the_next_start() {
        let root = tempfile::tempdir().unwrap();
        pipeline(&root.path().join("j"), "a");
        let t = topic_dir(root.path(), "j", "a");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::rename(root.path().join("j/shard-0"), t.join("shard-0")).unwrap();
        assert_eq!(to_list(root.path(), "j").unwrap().as_deref(), Some("a"));
        assert!(t.join("shard-0").exists() && t.join("job.json").exists() && t.join("schemas").exists());
    }

    #[test]
    fn two_checkpoints_for_one_topic_are_refused() {
        let root = tempfile::tempdir().unwrap();
        pipeline(&root.path().join("j"), "a");
        pipeline(&topic_dir(root.path(), "j", "a"), "a");
        assert!(to_list(root.path(), "j").unwrap_err().to_string().contains("remove the stale one"));
    }

    #[test]
    fn topics_joining_after_the_first_start_begin_at_earliest() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read_known(root.path(), "j").unwrap(), None);
        assert_eq!(rule_for(None, "a"), StartRule::Initial);
        let k = Known::from([("a".into(), StartRule::Initial), ("b".into(), StartRule::Earliest)]);
        write_known(root.path(), "j", &k).unwrap();
        let k = read_known(root.path(), "j").unwrap().unwrap();
        assert_eq!(rule_for(Some(&k), "a"), StartRule::Initial);
        assert_eq!(rule_for(Some(&k), "b"), StartRule::Earliest);
        assert_eq!(rule_for(Some(&k), "c"), StartRule::Earliest);
    }

    /// Issue 49: a damaged topics.json is an error, never "no topics known": read as
    /// none, every topic would start afresh at the template's `kafkaReadOffset` (latest by
    /// default), and what was produced while the job was down would be skipped.
    #[test]
    fn a_damaged_known_file_is_an_error_not_a_first_start() {
        let root = tempfile::tempdir().unwrap();
        let k = Known::from([("a".into(), StartRule::Initial)]);
        write_known(root.path(), "j", &k).unwrap();
        let file = root.path().join("j").join(KNOWN_FILE);
        for damaged in [&b"{\"a\": \"Initi"[..], b"", b"\x00\x01not json", b"[\"a\"]"] {
            std::fs::write(&file, damaged).unwrap();
            let e = read_known(root.path(), "j").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{damaged:?}: {e}");
        }
    }

    #[test]
    fn checkpoints_from_before_the_known_file_count_as_known() {
        let root = tempfile::tempdir().unwrap();
        pipeline(&topic_dir(root.path(), "j", "a"), "a");
        std::fs::create_dir_all(root.path().join("jx.b")).unwrap();
        let k = read_known(root.path(), "j").unwrap().unwrap();
        assert_eq!(k, Known::from([("a".into(), StartRule::Initial)]));
    }
}
