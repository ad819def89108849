//! [`SourceSettings`]: the topic a job reads, its group, where a fresh job starts, and
//! the consumers and positions built from them.

use super::connection::Connection;
use super::metadata::Metadata;
use super::KafkaError;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the source reads from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSettings {
    /// Brokers and authentication.
    pub conn: Connection,
    /// The one topic.
    pub topic: String,
    /// `group.id`.
    pub group_id: String,
    /// Whether a job without a checkpoint starts at the earliest offset (else the latest).
    pub start_earliest: bool,
    /// `offsetGapPolicy`: what a position the broker no longer holds leads to.
    pub gap_policy: super::gaps::GapPolicy,
}

/// librdkafka settings of a shard's consumer (manual assignment, no auto commit).
pub const SHARD_CONSUMER: &[(&str, &str)] = &[
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    // Every partition is assigned at an explicit offset, so this only applies when
    // that offset no longer exists. Kafka's consumer docs: auto.offset.reset is
    // "What to do when there is no initial offset in Kafka or if the current
    // offset does not exist any more on the server (e.g. because that data has
    // been deleted)". Not silently: librdkafka's "error" delivers
    // ERR__AUTO_OFFSET_RESET to the consumer, and the job applies offsetGapPolicy
    // (see `kafka::gaps`) instead of rewinding a partition whose log was cut short.
    ("auto.offset.reset", "error"),
    // tansu holds each fetch for the full wait even when data is ready.
    ("fetch.wait.max.ms", "10"),
    ("queued.min.messages", "20000"),
    // Let one fetch carry a record of up to 32 MiB: tansu returns nothing (rather
    // than the first batch, as Kafka does since KIP-74) for a batch over the
    // partition's fetch size, which would stall the shard on a large record.
    ("max.partition.fetch.bytes", "33554432"),
    ("fetch.max.bytes", "67108864"),
    ("receive.message.max.bytes", "67109376"),
    ("enable.partition.eof", "false"),
];

impl SourceSettings {
    /// A consumer for manual assignment (no auto commit, low fetch wait).
    pub fn consumer(&self) -> Result<StreamConsumer, KafkaError> {
        let mut extra = vec![("group.id", self.group_id.as_str())];
        extra.extend_from_slice(SHARD_CONSUMER);
        self.conn.client("a consumer", &extra).map_err(|e| self.with_topic(e))
    }

    /// A metadata client for this topic (one per job; see [`Metadata`]).
    pub fn metadata(&self) -> Result<Metadata, KafkaError> {
        Metadata::new(&self.conn, &self.topic)
    }

    /// The topic's partitions, sorted (a short-lived metadata client).
    pub async fn partitions(&self) -> Result<Vec<i32>, KafkaError> {
        self.metadata()?.partitions().await
    }

    fn broker_err(&self, message: String) -> KafkaError {
        KafkaError::Broker { bootstrap: self.conn.bootstrap.clone(), topic: self.topic.clone(), message }
    }

    fn with_topic(&self, e: KafkaError) -> KafkaError {
        match e {
            KafkaError::Broker { message, .. } => self.broker_err(message),
            other => other,
        }
    }

    /// Where partitions without a checkpoint start: the group's committed offset if it
    /// has one, else the earliest or latest offset (`kafkaReadOffset`).
    pub async fn initial_positions(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let s = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            let group = [("group.id", s.group_id.as_str()), ("enable.auto.commit", "false")];
            let c: BaseConsumer = s.conn.client("a client", &group).map_err(|e| s.with_topic(e))?;
            let mut tpl = TopicPartitionList::new();
            for p in &partitions {
                tpl.add_partition(&s.topic, *p);
            }
            let committed = c.committed_offsets(tpl, Duration::from_secs(10)).ok();
            let mut out = BTreeMap::new();
            for p in partitions {
                let from_group =
                    committed.as_ref().and_then(|t| t.find_partition(&s.topic, p)).and_then(|e| match e.offset() {
                        Offset::Offset(o) if o >= 0 => Some(o),
                        _ => None,
                    });
                let pos = match from_group {
                    Some(o) => o,
                    None => {
                        let (lo, hi) = c
                            .fetch_watermarks(&s.topic, p, Duration::from_secs(10))
                            .map_err(|e| s.broker_err(format!("watermarks of partition {p}: {e}")))?;
                        if s.start_earliest {
                            lo
                        } else {
                            hi
                        }
                    }
                };
                out.insert(p, pos);
            }
            Ok(out)
        })
        .await
        .expect("offsets task")
    }
}

/// Point `consumer` at `positions` (partition → next offset).
pub fn assign(consumer: &StreamConsumer, topic: &str, positions: &BTreeMap<i32, i64>) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
            .map_err(|e| KafkaError::Config(format!("partition {p} offset {o}: {e}")))?;
    }
    consumer.assign(&tpl).map_err(|e| KafkaError::Config(format!("assign partitions of {topic}: {e}")))
}

/// Commit processed positions to the consumer group (informational).
pub fn commit_positions(consumer: &StreamConsumer, topic: &str, positions: &BTreeMap<i32, i64>) {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(*o));
    }
    if let Err(e) = consumer.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
        tracing::warn!(topic, error = %e, "committing offsets to the consumer group failed (informational only)");
    }
}
