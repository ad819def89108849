//! `kafka-to-kafka`: read every partition of a topic, map each message (JSON parse and
//! re-serialize, or copy), write to another topic and wait for the acknowledgements.

use super::{Batch, Latencies, Record, Sink, Source};
use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reads one topic from explicit positions (no consumer-group offsets: the job's own
/// logs are the progress record).
pub struct KafkaSource {
    consumer: BaseConsumer,
    topic: String,
    partitions: Vec<i32>,
    earliest: bool,
}

impl KafkaSource {
    /// A source for `topic` on `bootstrap`; `earliest` decides where a fresh job starts.
    pub fn new(bootstrap: &str, topic: &str, earliest: bool) -> Result<KafkaSource> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "flexrun-kafka-to-kafka")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "5")
            .set("fetch.min.bytes", "1")
            .create()
            .context("creating a Kafka consumer")?;
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(|e| anyhow!("cannot reach the Kafka broker at {bootstrap}: {e}"))?;
        let mut partitions: Vec<i32> = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        if partitions.is_empty() {
            bail!("topic {topic} does not exist on {bootstrap} (or has no partitions)");
        }
        partitions.sort_unstable();
        Ok(KafkaSource { consumer, topic: topic.into(), partitions, earliest })
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

/// Delivery counters and latency, updated by librdkafka's delivery callbacks. Each
/// message carries its creation time (µs since the epoch) as its opaque; the latency
/// recorded is creation → acknowledgement.
pub struct Acks {
    /// Acknowledged.
    pub ok: AtomicU64,
    /// Failed after librdkafka's retries.
    pub failed: AtomicU64,
    /// The first failure.
    pub first_error: Mutex<Option<String>>,
    /// Creation → acknowledgement, µs.
    pub latency_us: Mutex<Histogram<u64>>,
    /// Read by the job → acknowledgement, µs (when the opaque carries a read time).
    pub in_job_us: Mutex<Histogram<u64>>,
}

impl Acks {
    /// Empty counters.
    pub fn new() -> Arc<Acks> {
        let h = || Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds"));
        Arc::new(Acks {
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
            latency_us: h(),
            in_job_us: h(),
        })
    }
}

/// A producer context that fills [`Acks`].
#[derive(Clone)]
pub struct Timed(pub Arc<Acks>);

impl ClientContext for Timed {}

impl ProducerContext for Timed {
    /// (created, read by the job) µs since the epoch; read 0 when not applicable.
    type DeliveryOpaque = Box<(u64, u64)>;
    fn delivery(&self, r: &DeliveryResult<'_>, times: Box<(u64, u64)>) {
        match r {
            Ok(_) => {
                self.0.ok.fetch_add(1, Ordering::Relaxed);
                let now = super::now_us();
                let _ = self.0.latency_us.lock().expect("lock").record(now.saturating_sub(times.0).max(1));
                if times.1 > 0 {
                    let _ = self.0.in_job_us.lock().expect("lock").record(now.saturating_sub(times.1).max(1));
                }
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                self.0.first_error.lock().expect("lock").get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Writes to one topic and returns when the broker has acknowledged the whole batch.
pub struct KafkaSink {
    producer: ThreadedProducer<Timed>,
    acks: Arc<Acks>,
    topic: String,
    json: bool,
    sent: u64,
}

impl KafkaSink {
    /// A sink for `topic` on `bootstrap`; with `json`, each message is parsed and re-serialized.
    pub fn new(bootstrap: &str, topic: &str, json: bool) -> Result<KafkaSink> {
        let acks = Acks::new();
        let producer: ThreadedProducer<Timed> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "1")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(Timed(acks.clone()))
            .context("creating a Kafka producer")?;
        Ok(KafkaSink { producer, acks, topic: topic.into(), json, sent: 0 })
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
