//! Object storage against the real GCS emulator (gcp-storage-emulator, started by
//! scripts/stack.sh) and the local disk: the calls the window committer makes, names
//! with ':' as Google's windowed file names have, and the parallel committer's
//! stage / trash / publish / sweep.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::gcs_faults;
use flexrun::kafka_to_gcs::committer::{staging_prefix, Committer};
use flexrun::kafka_to_gcs::log::FilePlan;
use flexrun::store::{Location, Store};
use std::collections::BTreeSet;

fn bucket() -> String {
    std::env::var("FLEXRUN_GCS_BUCKET").expect("FLEXRUN_GCS_BUCKET (scripts/stack.sh env)")
}

fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), chrono::Utc::now().timestamp_micros())
}

async fn stores() -> Vec<(Store, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let gcs = Location::parse(&format!("gs://{}/{}/", bucket(), unique("store"))).unwrap();
    let local = Location::parse(&format!("{}/out/", dir.path().display())).unwrap();
    vec![
        (Store::open(&gcs, None).await.expect("the emulator's bucket"), tempfile::tempdir().unwrap()),
        (Store::open(&local, None).await.unwrap(), dir),
    ]
}

#[tokio::test]
async fn put_list_rename_and_delete_on_the_emulator_and_on_disk() {
    for (s, _dir) in stores().await {
        let name = "w/output2024-05-01T12:00:00.000Z-2024-05-01T12:05:00.000Z-pane-0-last-00-of-02.json";
        s.put("_temporary/a/x", b"{\"a\":1}\n".to_vec()).await.unwrap();
        s.put("_temporary/a/empty", Vec::new()).await.unwrap();
        assert_eq!(s.list("_temporary/").await.unwrap(), vec!["_temporary/a/empty", "_temporary/a/x"]);
        s.rename("_temporary/a/x", name).await.unwrap();
        // A retry after a crash between the copy and the delete, or after the rename.
        s.rename("_temporary/a/x", name).await.unwrap();
        assert_eq!(s.get(name).await.unwrap(), b"{\"a\":1}\n", "{}", s.url(name));
        assert_eq!(s.list("_temporary/").await.unwrap(), vec!["_temporary/a/empty"]);
        assert_eq!(s.get("_temporary/a/empty").await.unwrap(), b"");
        s.delete("_temporary/a/empty").await.unwrap();
        s.delete("_temporary/a/empty").await.expect("deleting what is gone is not an error");
        assert!(s.get("nope").await.unwrap_err().is_not_found());
        assert_eq!(s.list("").await.unwrap(), vec![name.to_string()]);
    }
}

#[tokio::test]
async fn the_committer_trashes_stale_files_publishes_in_parallel_and_sweeps() {
    for (store, _dir) in stores().await {
        let staging = staging_prefix("store-test");
        let c = Committer { store: store.clone(), parallelism: 16, staging: staging.clone() };
        // An earlier run left 3 files for the window, one under a name this run does not use.
        for i in 0..3 {
            store.put(&format!("out-W-pane-0-last-{i:02}-of-03.json"), b"old\n".to_vec()).await.unwrap();
        }
        let files: Vec<FilePlan> = (0..2)
            .map(|i| FilePlan {
                staged: format!("{staging}W/a1/out-W-pane-0-last-{i:02}-of-02.json"),
                final_name: format!("out-W-pane-0-last-{i:02}-of-02.json"),
                records: 1,
            })
            .collect();
        let data = files.iter().map(|f| (f.staged.clone(), format!("new {}\n", f.final_name).into_bytes())).collect();
        c.stage(data).await.unwrap();
        store.put(&format!("{staging}V/a0/orphan"), b"x".to_vec()).await.unwrap();
        let t = c.publish(&["out-W-pane-".to_string()], &files).await.unwrap();
        assert_eq!((t.files, t.trashed), (2, 3), "the old window's three files were removed");
        let left = store.list("out-W-").await.unwrap();
        assert_eq!(left, files.iter().map(|f| f.final_name.clone()).collect::<Vec<_>>());
        assert_eq!(store.get(&left[0]).await.unwrap(), format!("new {}\n", left[0]).into_bytes());
        assert_eq!(c.sweep(&BTreeSet::new()).await.unwrap(), 1, "only the orphan was still staged");
        assert!(store.list(&staging).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_missing_bucket_and_a_bad_directory_are_named() {
    let e = Store::open(&Location::parse("gs://no-such-bucket-flexrun/x/").unwrap(), None).await.err().unwrap();
    assert!(e.to_string().contains("gs://no-such-bucket-flexrun/: no such bucket"), "{e}");
    let e = Store::open(&Location::parse("gs://b/x/").unwrap(), Some("127.0.0.1:1")).await.err().unwrap();
    assert!(e.to_string().contains("unreachable"), "{e}");
    let e = Store::open(&Location::Local("/proc/flexrun-nope/".into()), None).await.err().unwrap();
    assert!(e.to_string().contains("cannot create the directory"), "{e}");
}

/// Google's retry strategy: "HTTP 408, 429, and 5xx response codes" are transient and
/// retried; anything else (a 403 here) is not.
#[tokio::test]
async fn transient_answers_are_retried_and_others_are_not() {
    let prefix = format!("{}/", unique("faults"));
    let loc = Location::parse(&format!("gs://{}/{prefix}", bucket())).unwrap();
    let s = Store::open(&loc, None).await.unwrap();
    for status in [503u16, 429, 408] {
        gcs_faults(&prefix, Some((status, 2)));
        s.put("a", b"x".to_vec()).await.unwrap_or_else(|e| panic!("{status} is retried: {e}"));
        assert_eq!(gcs_faults(&prefix, None)["served"], 2, "two {status} answers, then success");
    }
    assert_eq!(s.get("a").await.unwrap(), b"x");
    gcs_faults(&prefix, Some((403, 1)));
    let e = s.put("b", b"y".to_vec()).await.unwrap_err();
    assert_eq!(gcs_faults(&prefix, None)["served"], 1, "a 403 is not retried");
    assert!(e.to_string().contains("upload") && e.to_string().contains("403"), "{e}");
    gcs_faults(&prefix, Some((0, 0)));
}

/// A bucket that answers 503 eight times, more than the six attempts the store once
/// made: a running job's call waits it out (no attempt limit) and succeeds, and the
/// launcher's clock shows every wait at least the schedule's jittered floor (half of 50
/// ms doubling).
#[tokio::test]
async fn an_outage_longer_than_six_attempts_is_waited_out_with_growing_waits() {
    let prefix = format!("{}/", unique("outage"));
    let s = Store::open(&Location::parse(&format!("gs://{}/{prefix}", bucket())).unwrap(), None).await.unwrap();
    gcs_faults(&prefix, Some((503, 8)));
    s.put("a", b"x".to_vec()).await.expect("the put succeeds once the outage ends");
    let st = gcs_faults(&prefix, None);
    gcs_faults(&prefix, Some((0, 0)));
    assert_eq!(s.get("a").await.unwrap(), b"x".to_vec());
    let at: Vec<f64> = st["served_at_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(at.len(), 8, "every injected failure was met, none skipped: {st}");
    let floor = flexrun::retry::Backoff { jitter: flexrun::retry::Jitter::None, ..flexrun::retry::Backoff::STORAGE };
    for (n, pair) in at.windows(2).enumerate() {
        let want = floor.delay(n as u32 + 1).unwrap().as_secs_f64() * 1000.0 / 2.0;
        assert!(
            pair[1] - pair[0] >= want - 1.0,
            "wait {} was {:.1} ms, the schedule's floor is {want} ms: {st}",
            n + 1,
            pair[1] - pair[0]
        );
    }
}
