//! What an at-least-once shard has sent but not yet committed, so that a restart can
//! say how many messages it may write twice.
//!
//! At-least-once keeps no write-ahead log: a restart re-reads from the last commit, and
//! whatever had been appended after it is appended again. Before each append the shard
//! replaces a small marker, `sent.json`, with the batch's end positions. It is written
//! but not fsynced: it has to outlive a killed process, which the page cache does, not
//! a lost machine, and an fsync per batch is the cost at-least-once exists to avoid. A
//! restart compares the marker with where it resumes; the difference is an upper bound
//! on the duplicates it will write (`messages_possibly_duplicated` in the summary and
//! `/metrics`).
//!
//! ```
//! use flexrun::kafka_to_bq::run::sent;
//! use std::collections::BTreeMap;
//! let d = tempfile::tempdir().unwrap();
//! sent::record(d.path(), &BTreeMap::from([(0, 500), (1, 300)])).unwrap();
//! assert_eq!(sent::possibly_resent(d.path(), &BTreeMap::from([(0, 400), (1, 300)])), 100);
//! ```

use std::collections::BTreeMap;
use std::path::Path;

const MARKER: &str = "sent.json";

/// Replace the marker with `positions` (the next offset per partition after the batch
/// about to be appended).
pub fn record(shard_dir: &Path, positions: &BTreeMap<i32, i64>) -> std::io::Result<()> {
    let tmp = shard_dir.join("sent.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(positions)?)?;
    std::fs::rename(&tmp, shard_dir.join(MARKER))
}

/// Messages between `resume` and the marker, over every partition: what a restart
/// resuming at `resume` may append a second time. 0 without a marker (or an unreadable
/// one: the count is a report, never a reason to stop).
pub fn possibly_resent(shard_dir: &Path, resume: &BTreeMap<i32, i64>) -> u64 {
    let Ok(text) = std::fs::read(shard_dir.join(MARKER)) else { return 0 };
    let Ok(sent) = serde_json::from_slice::<BTreeMap<i32, i64>>(&text) else { return 0 };
    sent.iter().map(|(p, s)| (s - resume.get(p).copied().unwrap_or(*s)).max(0) as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_counted_without_a_marker_or_once_caught_up() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(possibly_resent(d.path(), &BTreeMap::from([(0, 10)])), 0);
        record(d.path(), &BTreeMap::from([(0, 10), (3, 7)])).unwrap();
        assert_eq!(possibly_resent(d.path(), &BTreeMap::from([(0, 10), (3, 7)])), 0, "all committed");
        assert_eq!(possibly_resent(d.path(), &BTreeMap::from([(0, 4)])), 6, "partition 3 not this shard's now");
        std::fs::write(d.path().join(MARKER), b"{torn").unwrap();
        assert_eq!(possibly_resent(d.path(), &BTreeMap::from([(0, 0)])), 0);
    }
}
