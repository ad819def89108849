//! Where generated messages go: Kafka, a file, stdout, or nowhere (benchmarks).

use crate::kafka::connection::BULK_PRODUCER;
use crate::kafka::{AckContext, Acks, Connection};
use anyhow::{anyhow, Context, Result};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A destination for generated messages.
pub enum Sink {
    /// A Kafka topic; messages go round-robin over its partitions.
    Kafka {
        /// The producer.
        producer: ThreadedProducer<AckContext>,
        /// Topic.
        topic: String,
        /// Partitions.
        partitions: Vec<i32>,
        /// Delivery counters.
        deliveries: Arc<Acks>,
        /// Next partition index.
        next: usize,
    },
    /// Lines in a file.
    File(std::io::BufWriter<std::fs::File>),
    /// An Avro object container file.
    AvroFile(Box<apache_avro::Writer<'static, std::io::BufWriter<std::fs::File>>>),
    /// Lines on stdout.
    Stdout(std::io::BufWriter<std::io::Stdout>),
    /// Discarded (the generator's own speed).
    Null,
}

/// Append one record to an Avro container file.
pub fn append_avro(
    w: &mut apache_avro::Writer<'static, std::io::BufWriter<std::fs::File>>,
    v: apache_avro::types::Value,
) -> Result<()> {
    w.append(v).map_err(|e| anyhow!("writing the Avro file: {e}"))?;
    Ok(())
}

impl Sink {
    /// An Avro container file of `schema` (the schema lives as long as the process).
    pub fn avro_file(schema: &str, file: std::io::BufWriter<std::fs::File>) -> Result<Sink> {
        let schema = apache_avro::Schema::parse_str(schema).map_err(|e| anyhow!("Avro schema: {e}"))?;
        let schema: &'static apache_avro::Schema = Box::leak(Box::new(schema));
        Ok(Sink::AvroFile(Box::new(apache_avro::Writer::new(schema, file))))
    }

    /// A Kafka sink for `topic` (which must exist; its partitions are looked up).
    pub async fn kafka(bootstrap: &str, topic: &str) -> Result<Sink> {
        let conn = Connection::plaintext(bootstrap);
        let partitions = crate::kafka::Metadata::new(&conn, topic)?.partitions().await?;
        let deliveries = Acks::new();
        let producer = conn.producer(BULK_PRODUCER, AckContext::new(deliveries.clone()))?;
        Ok(Sink::Kafka { producer, topic: topic.into(), partitions, deliveries, next: 0 })
    }

    /// Send one message created at `ts_ms`. Waits while the producer queue is full.
    pub fn send(&mut self, payload: &[u8], ts_ms: i64) -> Result<()> {
        match self {
            Sink::Kafka { producer, topic, partitions, next, .. } => {
                let p = partitions[*next % partitions.len()];
                *next += 1;
                let mut rec: BaseRecord<'_, (), [u8]> =
                    BaseRecord::to(topic).payload(payload).partition(p).timestamp(ts_ms);
                loop {
                    match producer.send(rec) {
                        Ok(()) => return Ok(()),
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            rec = r;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err((e, _)) => return Err(anyhow!("producing to {topic}: {e}")),
                    }
                }
            }
            Sink::File(w) => {
                w.write_all(payload)?;
                w.write_all(b"\n")?;
                Ok(())
            }
            Sink::AvroFile(_) => Err(anyhow!("Avro files take records (append_avro), not bytes")),
            Sink::Stdout(w) => {
                w.write_all(payload)?;
                w.write_all(b"\n")?;
                Ok(())
            }
            Sink::Null => {
                std::hint::black_box(payload);
                Ok(())
            }
        }
    }

    /// Wait for every message to be delivered; returns (delivered, failed).
    pub fn finish(&mut self) -> Result<(u64, u64)> {
        match self {
            Sink::Kafka { producer, deliveries, topic, .. } => {
                producer.flush(Duration::from_secs(120)).with_context(|| format!("flushing messages to {topic}"))?;
                Ok((deliveries.ok.load(Ordering::Relaxed), deliveries.failed.load(Ordering::Relaxed)))
            }
            Sink::File(w) => {
                w.flush()?;
                Ok((0, 0))
            }
            Sink::AvroFile(w) => {
                w.flush().map_err(|e| anyhow!("writing the Avro file: {e}"))?;
                w.get_mut().flush()?;
                Ok((0, 0))
            }
            Sink::Stdout(w) => {
                w.flush()?;
                Ok((0, 0))
            }
            Sink::Null => Ok((0, 0)),
        }
    }

    /// The first delivery error, if any.
    pub fn first_error(&self) -> Option<String> {
        match self {
            Sink::Kafka { deliveries, .. } => deliveries.first_error.lock().expect("lock").clone(),
            _ => None,
        }
    }

    /// Messages acknowledged so far (Kafka only).
    pub fn delivered(&self) -> Option<u64> {
        match self {
            Sink::Kafka { deliveries, .. } => Some(deliveries.ok.load(Ordering::Relaxed)),
            _ => None,
        }
    }
}
