//! What an at-least-once shard has sent but not yet committed, so that a restart can
//! say how many messages it may write twice.
//!
//! At-least-once keeps no write-ahead log: a restart re-reads from the last commit, and
//! whatever had been appended after it is appended again. Before each append the shard
//! writes a `sent` line to the progress journal with the batch's end positions. It is
//! written but not fsynced: it has to outlive a killed process, which the page cache
//! does, not a lost machine, and an fsync per batch is the cost at-least-once exists to
//! avoid. A restart compares the marker with where it resumes; the difference is an upper
//! bound on the duplicates it will write (`messages_possibly_duplicated` in the summary
//! and `/metrics`).
//!
//! ```
//! use flexrun::kafka_to_bq::run::sent;
//! use std::collections::BTreeMap;
//! let marker = BTreeMap::from([(0, 500), (1, 300)]);
//! assert_eq!(sent::possibly_resent(Some(&marker), &BTreeMap::from([(0, 400), (1, 300)])), 100);
//! ```

use std::collections::BTreeMap;

/// Messages between `resume` and the `sent` marker (the positions after the last batch
/// sent, from the progress journal), over every partition: what a restart resuming at
/// `resume` may append a second time. 0 without a marker.
pub fn possibly_resent(sent: Option<&BTreeMap<i32, i64>>, resume: &BTreeMap<i32, i64>) -> u64 {
    let Some(sent) = sent else { return 0 };
    sent.iter().map(|(p, s)| (s - resume.get(p).copied().unwrap_or(*s)).max(0) as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_counted_without_a_marker_or_once_caught_up() {
        assert_eq!(possibly_resent(None, &BTreeMap::from([(0, 10)])), 0);
        let sent = BTreeMap::from([(0, 10), (3, 7)]);
        assert_eq!(possibly_resent(Some(&sent), &BTreeMap::from([(0, 10), (3, 7)])), 0, "all committed");
        assert_eq!(possibly_resent(Some(&sent), &BTreeMap::from([(0, 4)])), 6, "partition 3 not this shard's now");
    }
}
