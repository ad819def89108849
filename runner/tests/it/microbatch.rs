//! rate-to-stats and kafka-to-kafka: latency reports, bounded logs, and a crash under
//! asynchronous progress tracking that replays and loses nothing (real broker).

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::{flexrun, text, wait_with_timeout, Bounded};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("summary written")).expect("summary JSON")
}

#[test]
fn rate_to_stats_reports_latency_in_every_progress_mode() {
    let dir = tempfile::tempdir().unwrap();
    for (i, flags) in [vec!["--async-log-purge=false"], vec!["--async-progress-tracking"]].iter().enumerate() {
        let json = dir.path().join(format!("s{i}.json"));
        let mut args = vec![
            "--template",
            "rate-to-stats",
            "--job-name",
            "r",
            "--checkpoint-dir",
            dir.path().join(format!("c{i}")).to_str().unwrap().to_string().leak(),
            "--summary-json",
            json.to_str().unwrap(),
            "--parameters",
            "rowsPerSecond=20000,messagesLimit=20000",
        ];
        args.extend(flags.iter().copied());
        let started = Instant::now();
        let o = flexrun(&args).bounded();
        assert!(o.status.success(), "{}", text(&o));
        let s = summary(&json);
        assert_eq!(s["records"], 20000, "{s}");
        assert!(s["batches"].as_u64().unwrap() > 10, "micro-batches, not one: {s}");
        let [p50, p99] = [s["latency_ms"][0].as_f64().unwrap(), s["latency_ms"][1].as_f64().unwrap()];
        assert!(p50 > 0.0 && p50 <= p99 && p99 < 1000.0, "{s}");
        let in_job_p99 = s["in_job_latency_ms"][1].as_f64().unwrap();
        assert!(in_job_p99 <= p99, "the job's share cannot exceed the end-to-end latency: {s}");
        // 20,000 at 20,000/s: about a second, not faster (the rate holds) and not much slower.
        let secs = started.elapsed().as_secs_f64();
        assert!((0.9..10.0).contains(&secs), "{secs} s");
        assert!(String::from_utf8_lossy(&o.stdout).contains("end-to-end latency ms"));
    }
}

#[test]
fn log_purge_keeps_the_logs_bounded_over_a_long_run() {
    // 400,000 records in batches of at most 50: thousands of batches, many segments' worth.
    for purge in ["true", "false"] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("s.json");
        let ckpt = dir.path().join("c");
        let o = flexrun(&[
            "--template",
            "rate-to-stats",
            "--job-name",
            "long",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
            "--batch-rows",
            "50",
            "--async-log-purge",
            purge,
            "--summary-json",
            json.to_str().unwrap(),
            "--parameters",
            "rowsPerSecond=200000,messagesLimit=400000",
        ])
        .bounded();
        assert!(o.status.success(), "{}", text(&o));
        let s = summary(&json);
        let batches = s["batches"].as_u64().unwrap();
        assert!(batches >= 2000, "{s}");
        let files = std::fs::read_dir(ckpt.join("long")).unwrap().count();
        // Two logs, each at most its current segment and the one being purged.
        assert!(files <= 4, "purge={purge}: {files} files after {batches} batches");
    }
}

fn read_ids(bootstrap: &str, topic: &str, expect: usize, limit: Duration) -> HashMap<u64, u32> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "it-read")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut ids: HashMap<u64, u32> = HashMap::new();
    let (start, mut total) = (Instant::now(), 0usize);
    while start.elapsed() < limit && (ids.len() < expect || total == 0) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            *ids.entry(v["id"].as_u64().unwrap()).or_default() += 1;
            total += 1;
        }
    }
    ids
}

/// A message that is not JSON stops kafka-to-kafka with the record named and its batch
/// uncommitted; the same job restarted with messageFormat=RAW delivers everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_message_stops_kafka_to_kafka_and_loses_nothing() {
    let stack = crate::common::stack();
    let input = crate::common::unique("k2k_bad_in");
    let output = crate::common::unique("k2k_bad_out");
    flexrun::kafka::create_topic(&stack.kafka, &input, 1).await.unwrap();
    flexrun::kafka::create_topic(&stack.kafka, &output, 1).await.unwrap();
    // 300 good, then one that is not JSON, then 200 good: 501 in one partition.
    flexrun::local::produce(&stack.kafka, &input, 1, 0, 300, None, 50).await.unwrap();
    let producer: rdkafka::producer::FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &stack.kafka).create().unwrap();
    producer
        .send(
            rdkafka::producer::FutureRecord::<(), [u8]>::to(&input).payload(&b"{not json"[..]).partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    flexrun::local::produce(&stack.kafka, &input, 1, 300, 200, None, 50).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().to_str().unwrap();
    let params = |format: &str| {
        format!("readBootstrapServerAndTopic={};{input},writeBootstrapServerAndTopic={};{output},kafkaReadOffset=earliest,messageFormat={format}", stack.kafka, stack.kafka)
    };
    let o = flexrun(&[
        "--template",
        "kafka-to-kafka",
        "--job-name",
        "bad",
        "--checkpoint-dir",
        ckpt,
        "--batch-rows",
        "100",
        "--idle-timeout",
        "3s",
        "--parameters",
        &params("JSON"),
    ])
    .bounded();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("is not JSON") && err.contains("nothing is lost") && err.contains("messageFormat=RAW"),
        "{err}"
    );
    let written = output_count(&stack.kafka, &output);
    assert!(written <= 300, "only batches before the bad one were written: {written}");
    let o = flexrun(&[
        "--template",
        "kafka-to-kafka",
        "--job-name",
        "bad",
        "--checkpoint-dir",
        ckpt,
        "--batch-rows",
        "100",
        "--idle-timeout",
        "3s",
        "--parameters",
        &params("RAW"),
    ])
    .bounded();
    assert!(o.status.success(), "{}", text(&o));
    // The failed batch was not written at all, so its replay adds no duplicates.
    assert_eq!(
        output_count(&stack.kafka, &output),
        501,
        "the restart delivers the rest, the bad message included, once"
    );
}

/// Messages in a topic (sum of high watermarks).
fn output_count(bootstrap: &str, topic: &str) -> u64 {
    let c: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    md.topics()[0]
        .partitions()
        .iter()
        .map(|p| c.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).unwrap().1 as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_to_kafka_survives_a_kill_under_async_progress_without_loss() {
    let stack = crate::common::stack();
    let input = crate::common::unique("k2k_in");
    let output = crate::common::unique("k2k_out");
    flexrun::kafka::create_topic(&stack.kafka, &input, 4).await.unwrap();
    flexrun::kafka::create_topic(&stack.kafka, &output, 4).await.unwrap();
    let n = 60_000u64;
    flexrun::local::produce(&stack.kafka, &input, 4, 0, n, None, 200).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let params = format!(
        "readBootstrapServerAndTopic={};{input},writeBootstrapServerAndTopic={};{output},kafkaReadOffset=earliest",
        stack.kafka, stack.kafka
    );
    let ckpt = dir.path().to_str().unwrap().to_string();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "--template",
            "kafka-to-kafka",
            "--job-name",
            "k2k",
            "--checkpoint-dir",
            &ckpt,
            "--async-progress-tracking",
            "--progress-checkpoint-interval",
            "200ms",
            "--batch-rows",
            "500",
            "--parameters",
            &params,
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    // First run: killed (SIGKILL, no drain) once a few thousand messages are out and the
    // progress thread has persisted a commit entry (a condition, not a clock: under load
    // the first tick after data can come late).
    let mut child = flexrun(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>()).spawn().unwrap();
    let started = Instant::now();
    while output_count(&stack.kafka, &output) < 4_000 || !commit_persisted(dir.path()) {
        assert!(started.elapsed() < Duration::from_secs(60), "the job wrote nothing within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    let _ = child.wait();
    let written_before = output_count(&stack.kafka, &output);
    assert!(
        written_before < n,
        "the kill came after the job had finished ({written_before} written): the test did not test a crash"
    );
    // Second run: resumes from the last persisted progress and drains when idle.
    let json = dir.path().join("s.json");
    let second = flexrun(
        &args(&["--idle-timeout", "3s", "--summary-json", json.to_str().unwrap()])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .spawn()
    .unwrap();
    let o = wait_with_timeout(second, Duration::from_secs(120));
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&json);
    let ids = read_ids(&stack.kafka, &output, n as usize, Duration::from_secs(30));
    let missing: Vec<u64> = (0..n).filter(|i| !ids.contains_key(i)).take(5).collect();
    assert!(missing.is_empty(), "lost ids, e.g. {missing:?} ({} of {n} present)", ids.len());
    let duplicates: u64 = ids.values().map(|c| (*c - 1) as u64).sum();
    eprintln!("first run wrote {written_before}, second run: {s}; duplicates {duplicates}");
    assert!(s["start"].as_str().unwrap().starts_with("resumed after batch"), "{s}");
    assert!(s["records"].as_u64().unwrap() >= n - written_before, "the second run wrote the rest: {s}");
    // At-least-once: what was replayed is duplicated, bounded by what the killed run wrote.
    assert!(duplicates <= written_before, "{duplicates} duplicates > {written_before} written before the kill");
}

#[test]
fn bad_microbatch_parameters_exit_2() {
    for (params, needle) in [
        ("rowsPerSecond=0", "rowsPerSecond must be above 0"),
        ("rowsPerSecond=100,messageBytes=4", "at least 16"),
        ("rowsPerSecond=fast", "rowsPerSecond"),
        ("rowsPerSecond=100,messagesLimit=-5", "messagesLimit"),
        ("rowsPerSecond=100,colour=red", "colour"),
    ] {
        let o = flexrun(&["--template", "rate-to-stats", "--parameters", params]).bounded();
        assert_eq!(o.status.code(), Some(2), "{params}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(needle), "{params}: {}", text(&o));
    }
    let o =
        flexrun(&["--template", "rate-to-stats", "--latency-warm-up", "later", "--parameters", "rowsPerSecond=100"])
            .bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--latency-warm-up"), "{}", text(&o));
    let o = flexrun(&[
        "--template",
        "kafka-to-kafka",
        "--parameters",
        "readBootstrapServerAndTopic=h:1;t,writeBootstrapServerAndTopic=h:1;u,messageFormat=AVRO",
    ])
    .bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("messageFormat"), "{}", text(&o));
    let o = flexrun(&["--template", "kafka-to-kafka", "--parameters", "readBootstrapServerAndTopic=h:1;t"]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("writeBootstrapServerAndTopic"), "{}", text(&o));
}

/// Whether any commit log (kafka-to-kafka keeps one per shard) under `dir` holds an entry.
fn commit_persisted(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            return commit_persisted(&p);
        }
        e.file_name().to_string_lossy().starts_with("commits.log") && std::fs::metadata(&p).is_ok_and(|m| m.len() > 0)
    })
}
