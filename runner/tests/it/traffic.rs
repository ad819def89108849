//! Recorded traffic, end to end: `flexrun local topic-rates` reads a real topic's
//! message timestamps into a CSV of rates, and `flexrun simulate --profile-file` replays
//! that CSV as the input.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::kafka;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// Messages per minute of the recorded shape, and their size.
const PER_MINUTE: [u64; 4] = [120, 360, 0, 240];
const BYTES: usize = 100;

async fn produce_history(bootstrap: &str, topic: &str, partitions: i32) {
    let producer: FutureProducer = kafka::Connection::plaintext(bootstrap).client("a test producer", &[]).unwrap();
    // Whole minutes an hour ago, so each minute is one bucket.
    let start = (chrono::Utc::now().timestamp_millis() / 60_000 - 60) * 60_000;
    let payload = vec![b'x'; BYTES];
    let mut sent = 0;
    for (minute, n) in PER_MINUTE.iter().enumerate() {
        for i in 0..*n {
            let ts = start + minute as i64 * 60_000 + (i * 60_000 / n) as i64;
            let rec = FutureRecord::<(), _>::to(topic).payload(&payload).partition(sent % partitions).timestamp(ts);
            producer.send(rec, Duration::from_secs(10)).await.expect("produce");
            sent += 1;
        }
    }
}

#[tokio::test]
async fn topic_rates_reads_the_timestamps_and_simulate_replays_them() {
    let s = stack();
    let topic = unique("rates");
    kafka::create_topic(&s.kafka, &topic, 3).await.unwrap();
    answer("produce", produce_history(&s.kafka, &topic, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rates.csv");
    let o = flexrun(&[
        "local",
        "topic-rates",
        "--bootstrap",
        &s.kafka,
        "--topic",
        &topic,
        "--bucket",
        "1m",
        "--output",
        csv.to_str().unwrap(),
    ])
    .bounded();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("720 messages in 4 buckets") && err.contains("mean message 100 B"), "{err}");
    let rows: Vec<Vec<String>> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    let rate = |r: &Vec<String>, i: usize| r[i].parse::<f64>().unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (r, n) in rows.iter().zip(PER_MINUTE) {
        assert_eq!(rate(r, 1), n as f64 / 60.0, "{rows:?}");
        assert_eq!(rate(r, 2), (n as usize * BYTES) as f64 / 60.0, "{rows:?}");
    }
    // Replayed as the input: each simulated minute carries its recorded rate, the file
    // repeating every 4 minutes; with --qps the same shape is scaled to that mean.
    for (qps, scale) in [(None, 1.0), (Some("30"), 10.0)] {
        let mut args = vec![
            "simulate",
            "--profile-file",
            csv.to_str().unwrap(),
            "--duration",
            "1h",
            "--partitions",
            "3",
            "--noise",
            "0",
            "--format",
            "csv",
        ];
        if let Some(q) = qps {
            args.extend(["--qps", q]);
        }
        let o = flexrun(&args).bounded();
        assert!(o.status.success(), "{}", text(&o));
        let series = String::from_utf8(o.stdout).unwrap();
        let input: Vec<f64> = series.lines().skip(1).map(|l| l.split(',').nth(1).unwrap().parse().unwrap()).collect();
        assert_eq!(input.len(), 60);
        for (k, got) in input.iter().enumerate() {
            let want = PER_MINUTE[k % 4] as f64 / 60.0 * scale;
            assert!(
                (got - want).abs() <= 0.05 + want * 1e-6,
                "minute {k}: {got} records/s, recorded {want}: {input:?}"
            );
        }
    }
}
