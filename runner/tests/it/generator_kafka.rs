//! streaming-data-generator against the real broker: exact message limits spread over
//! every partition, and a steady rate measured from the Kafka timestamps themselves.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

const SEED_SCHEMA: &str = r#"{"logStreamId":"{{integer(1000001,2000000)}}","message":"{{alphaNumeric(962)}}"}"#;

fn generate(s: &Stack, topic: &str, qps: u64, limit: u64) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("seed.json");
    std::fs::write(&schema, SEED_SCHEMA).unwrap();
    let params = format!("qps={qps},schemaLocation={},sinkType=KAFKA,bootstrapServer={},kafkaTopic={topic},outputType=JSON,messagesLimit={limit}", schema.display(), s.kafka);
    flexrun(&["--template", "streaming-data-generator", "--seed", "5", "--parameters", &params]).bounded()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_limit_is_exact_and_spread_over_every_partition() {
    let s = stack();
    let topic = unique("gen50k");
    flexrun::kafka::create_topic(&s.kafka, &topic, 6).await.unwrap();
    let o = generate(&s, &topic, 100_000, 50_000);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("50000 messages"), "{}", text(&o));
    let metadata = flexrun::kafka::Metadata::new(&flexrun::kafka::Connection::plaintext(&s.kafka), &topic).unwrap();
    let hw = metadata.high_watermarks(&[0, 1, 2, 3, 4, 5]).await.unwrap();
    assert_eq!(hw.values().sum::<i64>(), 50_000, "{hw:?}");
    assert!(hw.values().all(|n| *n > 0), "every partition gets messages: {hw:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_achieved_rate_over_10_seconds_is_within_2_percent() {
    let s = stack();
    let topic = unique("genrate");
    flexrun::kafka::create_topic(&s.kafka, &topic, 2).await.unwrap();
    let (qps, n) = (2000u64, 20_001u64); // 20,000 intervals of 0.5 ms = 10 s
    let o = generate(&s, &topic, qps, n);
    assert!(o.status.success(), "{}", text(&o));
    // Read every message's Kafka timestamp (its creation time) back from the broker.
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.kafka)
        .set("group.id", "rate-check")
        .set("fetch.wait.max.ms", "10")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset(&topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut ts = Vec::with_capacity(n as usize);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while (ts.len() as u64) < n && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            ts.push(m.timestamp().to_millis().expect("timestamped"));
        }
    }
    assert_eq!(ts.len() as u64, n);
    ts.sort_unstable();
    let span_s = (ts[ts.len() - 1] - ts[0]) as f64 / 1000.0;
    let achieved = (n - 1) as f64 / span_s;
    eprintln!("target {qps}/s, achieved {achieved:.1}/s over {span_s:.3} s");
    assert!((achieved / qps as f64 - 1.0).abs() <= 0.02, "achieved {achieved:.1}/s for a target of {qps}/s");
    // Steady, not bursty: every full second holds close to qps messages.
    let start = ts[0];
    let mut per_second = vec![0u64; span_s as usize];
    for t in &ts {
        let k = ((t - start) / 1000) as usize;
        if k < per_second.len() {
            per_second[k] += 1;
        }
    }
    assert!(per_second.iter().all(|c| (*c as f64 / qps as f64 - 1.0).abs() <= 0.05), "{per_second:?}");
}
