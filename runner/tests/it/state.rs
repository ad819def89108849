//! kafka-to-gcs's window state and checkpoints end to end, on the local stack: heap and
//! lsm backends, full and incremental checkpoints to the Cloud Storage emulator, one
//! SIGKILL test per crash point (during a checkpoint's upload, during a window's flush,
//! during recovery), a corrupt checkpoint passed over for the previous one, the worker
//! pool scaled by the autoscaler, and every bad flag named with exit status 2.
//!
//! Records are stamped half an hour ahead (inside the 1 h `maxTimestampSkew`, so
//! kept), all within one 1 s window, so that window cannot close before the drain (the
//! watermark is the newest timestamp read, inside the window, and then the wall clock,
//! half an hour before it): the state holds every record while checkpoints are taken,
//! and a restart must rebuild it from a checkpoint (each test asserts which one) to put
//! every record in exactly one file.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::store::{Location, Store};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;

/// The start of a 1 s window half an hour ahead of now: a window no record closes before
/// the drain. Inside the default `maxTimestampSkew` of 1 h, so the timestamps are kept.
/// (A day ahead, as it was, they were clamped to the time each record was read, and the
/// records fell in two windows whenever the reads crossed a second: CI failed on it.)
fn ahead_ms() -> i64 {
    (chrono::Utc::now().timestamp_millis() + 1_800_000) / 1000 * 1000
}

/// `n` messages over `partitions`, message `i` stamped `ts(i)`.
async fn produce(s: &Stack, topic: &str, partitions: i32, n: u64, ts: impl Fn(u64) -> i64) {
    let p: FutureProducer = flexrun::kafka::Connection::plaintext(&s.kafka).client("a producer", &[]).unwrap();
    let mut acks = Vec::new();
    for i in 0..n {
        // Hex of a hash: about as compressible as real identifiers, unlike a run of one letter.
        let pad: String =
            (0..25u64).map(|k| format!("{:08x}", (i * 31 + k).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32)).collect();
        let v = format!("{{\"id\":{i},\"pad\":\"{pad}\"}}");
        let r = FutureRecord::<(), _>::to(topic).payload(&v).partition((i % partitions as u64) as i32).timestamp(ts(i));
        acks.push(p.send_result(r).map_err(|(e, _)| e).unwrap());
    }
    for a in acks {
        answer("produce", a).await.unwrap().map_err(|(e, _)| e).unwrap();
    }
}

async fn topic(s: &Stack, name: &str, partitions: i32) -> String {
    let t = unique(name);
    answer("create topic", flexrun::kafka::admin::create_topic(&s.kafka, &t, partitions)).await.unwrap();
    t
}

struct Case {
    topic: String,
    out: String,
    checkpoints: String,
    ck: tempfile::TempDir,
    flags: Vec<String>,
    idle: &'static str,
}

/// `n` records in one window half an hour ahead, on two partitions.
async fn case(name: &str, backend: &str, kind: &str, n: u64) -> Case {
    let base = ahead_ms();
    case_with(name, backend, kind, n, move |i| base + i as i64 % 1000).await
}

async fn case_with(name: &str, backend: &str, kind: &str, n: u64, ts: impl Fn(u64) -> i64) -> Case {
    let s = stack();
    let t = topic(&s, name, 2).await;
    produce(&s, &t, 2, n, ts).await;
    let bucket = std::env::var("FLEXRUN_GCS_BUCKET").unwrap();
    let flags = ["--state-backend", backend, "--checkpoint-kind", kind, "--checkpoint-interval", "400ms"];
    Case {
        out: format!("gs://{bucket}/{t}/out/"),
        checkpoints: format!("gs://{bucket}/{t}/ck/"),
        topic: t,
        ck: tempfile::tempdir().unwrap(),
        flags: flags.iter().map(|f| f.to_string()).collect(),
        idle: "2s",
    }
}

impl Case {
    fn job(&self, extra: &[&str]) -> std::process::Command {
        let s = stack();
        let p = format!(
            "readBootstrapServerAndTopic={};{},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest,messageFormat=JSON,outputDirectory={},windowDuration=1s,numShards=4",
            s.kafka, self.topic, self.out
        );
        let ck = self.ck.path().to_str().unwrap();
        let mut c = flexrun(&["--template", "kafka-to-gcs", "--job-name", "st", "--checkpoint-dir", ck]);
        c.args(["--idle-timeout", self.idle, "--checkpoint-location", &self.checkpoints, "--summary-json"])
            .arg(self.ck.path().join("st.json"))
            .args(&self.flags)
            .args(extra)
            .args(["--parameters", &p]);
        c
    }

    /// Run with `FAILPOINTS=spec`; the run must die by SIGKILL there.
    fn crash(&self, spec: &str) -> String {
        let o = self.job(&[]).env("FAILPOINTS", spec).bounded();
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "the job did not die at {spec}: {}", text(&o));
        text(&o)
    }

    /// Run to the end; the summary.
    fn finish(&self) -> (serde_json::Value, String) {
        let o = self.job(&[]).bounded();
        assert!(o.status.success(), "{}", text(&o));
        (summary(&self.ck.path().join("st.json")), text(&o))
    }

    async fn checkpoint_store(&self) -> Store {
        Store::open(&Location::parse(&format!("{}st/", self.checkpoints)).unwrap(), None).await.unwrap()
    }
}

/// Every id in `0..n` exactly once over the files under `out`.
async fn assert_exactly_once(out: &str, n: u64) {
    let store = Store::open(&Location::parse(out).unwrap(), None).await.unwrap();
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for name in store.list("").await.unwrap() {
        assert!(!name.starts_with("_temporary/"), "a staging object is left: {name}");
        for l in String::from_utf8(store.get(&name).await.unwrap()).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            *seen.entry(v["id"].as_u64().unwrap()).or_default() += 1;
        }
    }
    let dup: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(dup.is_empty(), "duplicated: {dup:?}");
    let missing: Vec<u64> = (0..n).filter(|i| !seen.contains_key(i)).collect();
    assert!(missing.is_empty(), "missing {} ids, e.g. {:?}", missing.len(), &missing[..missing.len().min(10)]);
}

fn restored_from(j: &serde_json::Value) -> Option<u64> {
    j["state"]["restored_from"].as_u64()
}

/// Each backend and checkpoint kind end to end against the emulator: every record once,
/// the state's size reported, and an incremental checkpoint of unchanged state uploading
/// almost nothing while a full one uploads everything again.
#[tokio::test]
async fn every_backend_and_kind_checkpoints_and_writes_each_record_once() {
    for (backend, kind) in [("heap", "full"), ("lsm", "full"), ("lsm", "incremental")] {
        let n = 3000;
        let c = case(&format!("st_{backend}_{kind}"), backend, kind, n).await;
        let (j, out) = c.finish();
        assert_exactly_once(&c.out, n).await;
        let st = &j["state"];
        assert_eq!((st["backend"].as_str(), st["kind"].as_str()), (Some(backend), Some(kind)), "{j}");
        let cks = st["checkpoints"].as_array().unwrap();
        assert!(cks.len() >= 3, "{backend}/{kind}: checkpoints every 400 ms over a run of over 2 s: {j}");
        assert!(st["peak_state_bytes"].as_u64().unwrap() >= n * 100, "{j}");
        // Keys are (window, shard): 3,000 records fill all 4 shards of a window.
        let keys = st["peak_state_keys"].as_u64().unwrap();
        assert!((4..=4 * 8).contains(&keys), "peak keys {keys}: {j}");
        assert!(out.contains(&format!("state: {backend} backend, {kind} checkpoints")), "{out}");
        // Every record is read in the first few hundred ms, so the state is unchanged
        // from one checkpoint to the next for most of the run: look for two alike in a
        // row, and they must hold every record (one window, open until the drain).
        let unchanged = |a: &serde_json::Value, b: &serde_json::Value| {
            a["records"] == b["records"] && a["state_bytes"] == b["state_bytes"] && b["records"].as_u64() > Some(0)
        };
        let steady = cks.windows(2).find(|w| unchanged(&w[0], &w[1])).map(|w| &w[1]);
        let steady = steady.unwrap_or_else(|| panic!("no two checkpoints in a row of the same state: {j}"));
        assert_eq!(steady["records"], n, "all {n} records in the state until the drain: {j}");
        assert_eq!(j["timestamps_clamped"], 0, "the timestamps are within maxTimestampSkew: {j}");
        let (up, total) = (steady["uploaded_bytes"].as_u64().unwrap(), steady["total_bytes"].as_u64().unwrap());
        if kind == "incremental" {
            assert!(
                up * 10 < total,
                "an incremental checkpoint of unchanged state uploads only metadata: {up} of {total}"
            );
        } else {
            assert_eq!(up, total, "a full checkpoint uploads everything");
        }
    }
}

/// SIGKILL while the second checkpoint uploads: the restart restores the first one,
/// ignores the partial one, and never reuses its number.
#[tokio::test]
async fn a_kill_during_a_checkpoint_upload_restores_the_previous_checkpoint() {
    let c = case("st_upload", "lsm", "incremental", 500).await;
    c.crash("state::mid_upload=1*off->return");
    let (j, _) = c.finish();
    assert_eq!(restored_from(&j), Some(1), "the restart started from checkpoint 1: {j}");
    let ids: Vec<u64> =
        j["state"]["checkpoints"].as_array().unwrap().iter().map(|k| k["id"].as_u64().unwrap()).collect();
    assert!(ids.iter().all(|i| *i >= 3), "checkpoint 2 began, so its number is not reused: {ids:?}");
    assert_exactly_once(&c.out, 500).await;
}

/// SIGKILL halfway through publishing a window's files (at the drain), with checkpoints
/// holding that window: the restart rolls the window forward from the commit log,
/// restores the latest checkpoint, drops the window from it, and writes the rest once.
#[tokio::test]
async fn a_kill_during_a_window_flush_rolls_forward_and_drops_it_from_the_restored_state() {
    let c = case("st_flush", "heap", "full", 500).await;
    c.crash("gcs::mid_publish=return");
    let (j, _) = c.finish();
    assert_eq!(j["rolled_forward"], true, "{j}");
    assert!(restored_from(&j).is_some(), "state came from a checkpoint: {j}");
    assert_eq!(
        j["dropped_on_restore"], 1,
        "the one window, published by the roll-forward, left the restored state: {j}"
    );
    assert_exactly_once(&c.out, 500).await;
}

/// Windows closing while checkpoints are taken: 600 records over six past 1 s windows,
/// every 7th a window late, read slowly (150 msg/s) so windows close one by one between
/// checkpoints. SIGKILL after the third window is decided: the restart rolls it forward,
/// restores a checkpoint taken before that window closed, drops the window from the
/// restored state, and every record is in exactly one file.
#[tokio::test]
async fn windows_committed_after_the_restored_checkpoint_are_neither_lost_nor_doubled() {
    let base = 1_700_000_000_000;
    let ts = move |i: u64| base + i as i64 * 10 + if i.is_multiple_of(7) { 1500 } else { 0 };
    let mut c = case_with("st_interleave", "lsm", "incremental", 600, ts).await;
    c.flags.extend(["--worker-capacity", "150msg/s", "--autoscaling-algorithm", "NONE"].iter().map(|s| s.to_string()));
    c.crash("gcs::after_prepare=2*off->return");
    let (j, _) = c.finish();
    assert_eq!(j["rolled_forward"], true, "{j}");
    assert!(restored_from(&j).is_some(), "a checkpoint was restored: {j}");
    assert!(
        j["dropped_on_restore"].as_u64().unwrap() >= 1,
        "the rolled-forward window was dropped from the restored state: {j}"
    );
    assert_exactly_once(&c.out, 600).await;
}

/// SIGKILL during recovery itself (state fetched, not yet rebuilt): the next start
/// restores again from the same checkpoint.
#[tokio::test]
async fn a_kill_during_recovery_restores_again_on_the_next_start() {
    let c = case("st_restore", "lsm", "incremental", 500).await;
    c.crash("state::mid_upload=2*off->return");
    c.crash("state::mid_restore=return");
    let (j, _) = c.finish();
    assert_eq!(restored_from(&j), Some(2), "{j}");
    assert!(j["state"]["recovery_s"].as_f64().unwrap() > 0.0, "{j}");
    assert_exactly_once(&c.out, 500).await;
}

/// Two checkpoints complete, the third dies before its manifest, and the second is then
/// corrupted in the bucket: the restart says so and restores the first.
#[tokio::test]
async fn a_corrupt_checkpoint_is_detected_and_the_one_before_it_restored() {
    let c = case("st_corrupt", "lsm", "full", 500).await;
    c.crash("state::before_manifest=2*off->return");
    let store = c.checkpoint_store().await;
    let names = store.list("chk-0000000002/").await.unwrap();
    let mut biggest = (String::new(), 0);
    for n in names.iter().filter(|n| !n.ends_with("MANIFEST.json")) {
        let len = store.get(n).await.unwrap().len();
        if len > biggest.1 {
            biggest = (n.clone(), len);
        }
    }
    assert!(biggest.1 > 0, "checkpoint 2 has files: {names:?}");
    store.put(&biggest.0, vec![0u8; biggest.1]).await.unwrap();
    let (j, out) = c.finish();
    assert_eq!(restored_from(&j), Some(1), "{j}");
    let skipped = &j["state"]["skipped_checkpoints"];
    assert_eq!(skipped[0][0], 2, "{j}");
    assert!(skipped[0][1].as_str().unwrap().contains("checksum"), "{j}");
    assert!(out.contains("checkpoint 2 is corrupt or partial"), "{out}");
    assert_exactly_once(&c.out, 500).await;
}

/// The bucket refuses a checkpoint's uploads (HTTP 403, which is not retried): that
/// checkpoint fails, is counted, the job goes on, the next interval's succeeds, and
/// every record is written once.
#[tokio::test]
async fn a_refused_checkpoint_upload_is_counted_and_the_next_one_succeeds() {
    let mut c = case("st_refused", "heap", "full", 500).await;
    c.out = format!("{}/out/", c.ck.path().display());
    c.idle = "5s";
    let child = c.job(&[]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let store = c.checkpoint_store().await;
    let first = std::time::Instant::now();
    while store.list("chk-0000000001/MANIFEST.json").await.unwrap().is_empty() {
        assert!(first.elapsed().as_secs() < 30, "no first checkpoint");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let scope = format!("{}/ck/", c.topic);
    gcs_faults(&scope, Some((403, 3)));
    let o = wait_with_timeout(child, RUN_LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(gcs_faults(&scope, None)["served"], 3, "the refusals were served");
    let j = summary(&c.ck.path().join("st.json"));
    assert!(j["state"]["failed_checkpoints"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["state"]["checkpoints"].as_array().unwrap().len() >= 2, "later checkpoints completed: {j}");
    assert!(text(&o).contains("a checkpoint failed"), "{}", text(&o));
    assert_exactly_once(&c.out, 500).await;
}

/// Slow emulated workers (busy all the time, above the utilization hint) under
/// Dataflow's policy with its waits divided by 60: the autoscaler adds a worker, the
/// readers move, and still every record is in exactly one file.
#[tokio::test]
async fn the_autoscaler_resizes_the_workers_and_nothing_is_lost() {
    let mut c = case("st_scale", "heap", "full", 4000).await;
    c.flags.extend(
        ["--worker-capacity", "1000msg/s", "--autoscaling-interval", "1s", "--autoscaling-time-scale", "60"]
            .iter()
            .map(|s| s.to_string()),
    );
    let (j, out) = c.finish();
    let resizes = j["resizes"].as_array().unwrap();
    assert!(resizes.iter().any(|r| r[2].as_u64() > r[1].as_u64()), "scaled up: {j}\n{out}");
    assert_exactly_once(&c.out, 4000).await;
}

#[tokio::test]
async fn bad_state_flags_are_named_and_exit_2() {
    let s = stack();
    let p = format!(
        "readBootstrapServerAndTopic={};t,kafkaReadAuthenticationMode=NONE,messageFormat=JSON,outputDirectory=/tmp/flexrun-st-bad/",
        s.kafka
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    let under_a_file = format!("{}/ck/", file.path().display());
    let cases: [(&[&str], &str); 9] = [
        (&["--state-backend", "rocks"], "--state-backend"),
        (&["--checkpoint-kind", "delta"], "--checkpoint-kind"),
        (&["--checkpoint-kind", "incremental"], "needs --state-backend lsm"),
        (&["--checkpoint-interval", "0s"], "--checkpoint-interval"),
        (&["--checkpoint-interval=-3s"], "--checkpoint-interval"),
        (&["--checkpoint-location", "gs://no-such-bucket-flexrun/ck/"], "--checkpoint-location"),
        (&["--checkpoint-location", &under_a_file], "--checkpoint-location"),
        (&["--commit-parallelism", "0"], "--commit-parallelism"),
        (&["--commit-parallelism", "abc"], "--commit-parallelism"),
    ];
    for (flags, want) in cases {
        let ck = tempfile::tempdir().unwrap();
        let mut args =
            vec!["--template", "kafka-to-gcs", "--job-name", "bad", "--checkpoint-dir", ck.path().to_str().unwrap()];
        args.extend_from_slice(flags);
        args.extend(["--parameters", &p]);
        let o = flexrun(&args).bounded();
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{flags:?}: expected {want:?} in {}", text(&o));
    }
}
