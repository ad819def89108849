//! `kafka-to-kafka`: read every partition of a topic, map each message (JSON parse and
//! re-serialize, or copy), write to another topic and wait for the acknowledgements.

use super::{Batch, Latencies, Record, Sink, Source};
use crate::kafka::oauth::AuthContext;
use crate::kafka::{parse_server_and_topic, AckContext, Acks, Connection};
use anyhow::{anyhow, bail, Result};
use flexrun_templates::typed::kafka_to_kafka::{KafkaReadOffset, MessageFormat, Name as K2kName, Params as K2k};
use flexrun_templates::ResolvedParams;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kafka-to-kafka's settings, from its template parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaToKafkaConfig {
    /// `readBootstrapServerAndTopic`.
    pub read: (Connection, String),
    /// `writeBootstrapServerAndTopic`.
    pub write: (Connection, String),
    /// `kafkaReadOffset=earliest`.
    pub start_earliest: bool,
    /// `messageFormat` JSON (parse and re-serialize) rather than RAW (copy).
    pub json: bool,
}

impl KafkaToKafkaConfig {
    /// From validated parameters, or the parameter that is wrong and why.
    pub fn from_params(p: &ResolvedParams) -> Result<KafkaToKafkaConfig, String> {
        let split = |k: K2kName, v: &str| {
            parse_server_and_topic(v)
                .map(|(b, t)| (Connection::plaintext(&b), t))
                .map_err(|e| format!("{}: {e}", k.as_str()))
        };
        Ok(KafkaToKafkaConfig {
            read: split(K2kName::ReadBootstrapServerAndTopic, K2k(p).read_bootstrap_server_and_topic())?,
            write: split(K2kName::WriteBootstrapServerAndTopic, K2k(p).write_bootstrap_server_and_topic())?,
            start_earliest: K2k(p).kafka_read_offset() == KafkaReadOffset::Earliest,
            json: K2k(p).message_format() == MessageFormat::Json,
        })
    }
}

/// Reads one topic from explicit positions (no consumer-group offsets: the job's own
/// logs are the progress record).
pub struct KafkaSource {
    consumer: BaseConsumer<AuthContext>,
    topic: String,
    partitions: Vec<i32>,
    earliest: bool,
}

impl KafkaSource {
    /// A source for `topic` on `conn`; `earliest` decides where a fresh job starts.
    pub fn new((conn, topic): &(Connection, String), earliest: bool) -> Result<KafkaSource> {
        let bootstrap = &conn.bootstrap;
        let consumer: BaseConsumer<AuthContext> = conn.reader(
            "a Kafka consumer",
            &[
                ("group.id", "flexrun-kafka-to-kafka"),
                ("enable.auto.commit", "false"),
                ("fetch.wait.max.ms", "5"),
                ("fetch.min.bytes", "1"),
            ],
        )?;
        let md = consumer
            .fetch_metadata(Some(topic.as_str()), Duration::from_secs(10))
            .map_err(|e| anyhow!("cannot reach the Kafka broker at {bootstrap}: {e}"))?;
        let mut partitions: Vec<i32> = md
            .topics()
            .iter()
            .find(|t| t.name() == topic.as_str())
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        if partitions.is_empty() {
            bail!("topic {topic} does not exist on {bootstrap} (or has no partitions)");
        }
        partitions.sort_unstable();
        Ok(KafkaSource { consumer, topic: topic.clone(), partitions, earliest })
    }
}

impl Source for KafkaSource {
    fn seek(&mut self, positions: &BTreeMap<i32, i64>) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for p in &self.partitions {
            let offset = match positions.get(p) {
                Some(o) => Offset::Offset(*o),
                None if self.earliest => Offset::Beginning,
                None => Offset::End,
            };
            tpl.add_partition_offset(&self.topic, *p, offset).map_err(|e| anyhow!("{e}"))?;
        }
        self.consumer.assign(&tpl).map_err(|e| anyhow!("assigning {}: {e}", self.topic))
    }

    fn next_batch(&mut self, max: usize, wait: Duration) -> Result<Option<Batch>> {
        let mut batch = Batch::default();
        let mut timeout = wait;
        while batch.records.len() < max {
            match self.consumer.poll(timeout) {
                None => break,
                Some(Err(e)) => return Err(anyhow!("reading {}: {e}", self.topic)),
                Some(Ok(m)) => {
                    let created_us = m.timestamp().to_millis().map_or_else(super::now_us, |ms| ms.max(0) as u64 * 1000);
                    batch.records.push(Record {
                        created_us,
                        read_us: super::now_us(),
                        payload: m.payload().unwrap_or_default().to_vec(),
                    });
                    let e = batch.ranges.entry(m.partition()).or_insert((m.offset(), m.offset() + 1));
                    e.1 = m.offset() + 1;
                    // After the first record, take only what is already here.
                    timeout = Duration::ZERO;
                }
            }
        }
        Ok(Some(batch))
    }
}

/// Writes to one topic and returns when the broker has acknowledged the whole batch.
pub struct KafkaSink {
    producer: ThreadedProducer<AckContext<Box<(u64, u64)>>>,
    acks: Arc<Acks>,
    topic: String,
    json: bool,
    sent: u64,
}

impl KafkaSink {
    /// A sink for `topic` on `conn`; with `json`, each message is parsed and re-serialized.
    pub fn new((conn, topic): &(Connection, String), json: bool) -> Result<KafkaSink> {
        let acks = Acks::new();
        let producer = conn.producer(
            &[
                ("enable.idempotence", "true"),
                ("linger.ms", "1"),
                ("batch.num.messages", "10000"),
                ("queue.buffering.max.messages", "1000000"),
            ],
            AckContext::new(acks.clone()),
        )?;
        Ok(KafkaSink { producer, acks, topic: topic.clone(), json, sent: 0 })
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, batch: &Batch, latency: &mut Latencies) -> Result<()> {
        // Map the whole batch first: a bad record fails the batch before any of it is
        // written, so the restart replays it without duplicates.
        let mapped: Vec<Option<Vec<u8>>> = if self.json {
            batch
                .records
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let v: serde_json::Value = serde_json::from_slice(&r.payload).map_err(|e| anyhow!("record {i} of the batch is not JSON ({e}); kafka-to-kafka has no dead-letter destination, so the job stops here with the batch uncommitted (nothing is lost); use messageFormat=RAW to copy bytes"))?;
                    if !v.is_object() {
                        bail!("record {i} of the batch is JSON but not an object; the job stops with the batch uncommitted (nothing is lost); use messageFormat=RAW to copy bytes");
                    }
                    Ok(Some(serde_json::to_vec(&v).expect("serializing a Value")))
                })
                .collect::<Result<_>>()?
        } else {
            vec![None; batch.records.len()]
        };
        for (r, m) in batch.records.iter().zip(&mapped) {
            let payload: &[u8] = m.as_deref().unwrap_or(&r.payload);
            let mut rec = BaseRecord::with_opaque_to(&self.topic, Box::new((r.created_us, r.read_us)))
                .payload(payload)
                .timestamp((r.created_us / 1000) as i64);
            loop {
                match self.producer.send::<[u8], [u8]>(rec) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        rec = back;
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    Err((e, _)) => bail!("producing to {}: {e}", self.topic),
                }
            }
            self.sent += 1;
        }
        // At-least-once: the batch counts as done only when every message is acknowledged.
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.acks.ok.load(Ordering::Relaxed) + self.acks.failed.load(Ordering::Relaxed) < self.sent {
            if Instant::now() > deadline {
                bail!("the destination {} did not acknowledge the batch within 120 s", self.topic);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        if self.acks.failed.load(Ordering::Relaxed) > 0 {
            bail!(
                "writing to {} failed: {}",
                self.topic,
                self.acks.first_error.lock().expect("lock").clone().unwrap_or_default()
            );
        }
        for (from, to) in
            [(&self.acks.latency_us, &mut latency.end_to_end_us), (&self.acks.in_job_us, &mut latency.in_job_us)]
        {
            let mut h = from.lock().expect("lock");
            to.add(&*h).map_err(|e| anyhow!("latency histogram: {e}"))?;
            h.reset();
        }
        Ok(())
    }
}

impl Drop for KafkaSink {
    fn drop(&mut self) {
        let _ = self.producer.flush(Duration::from_secs(10));
    }
}
