//! [`Metadata`]: one long-lived librdkafka client per job for the topic's partitions,
//! watermarks and (at start-up) the consumer group's committed offsets. The autoscaler,
//! partition discovery and the dashboard read these every few seconds; a new client each
//! time would open new broker connections each time. A second client that start-up once
//! opened for the group's offsets alone took about 45 of 711 samples in a profile of a
//! 1,000-message job (BENCHMARKS.md, "Hot path").

use super::connection::Connection;
use super::oauth::AuthContext;
use super::KafkaError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often a running job looks for partitions added to its topic (both templates).
pub const PARTITION_DISCOVERY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Partition and watermark lookups for one topic, on one shared client. Cheap to clone.
#[derive(Clone)]
pub struct Metadata {
    inner: Arc<BaseConsumer<AuthContext>>,
    bootstrap: String,
    topic: String,
}

impl Metadata {
    /// A client for `topic`.
    pub fn new(conn: &Connection, topic: &str) -> Result<Metadata, KafkaError> {
        Self::with(conn, topic, &[])
    }

    /// A client for `topic` that can also read `group`'s committed offsets
    /// ([`Metadata::committed`]). It only asks: it joins no group and commits nothing.
    pub fn for_group(conn: &Connection, topic: &str, group: &str) -> Result<Metadata, KafkaError> {
        Self::with(conn, topic, &[("group.id", group), ("enable.auto.commit", "false")])
    }

    fn with(conn: &Connection, topic: &str, extra: &[(&str, &str)]) -> Result<Metadata, KafkaError> {
        let client: BaseConsumer<AuthContext> = conn.reader("a metadata client", extra)?;
        Ok(Metadata { inner: Arc::new(client), bootstrap: conn.bootstrap.clone(), topic: topic.to_string() })
    }

    /// The client, its queue polled first: a client that authenticates with Google's
    /// credentials is asked for a new token through that queue ([`super::oauth`]).
    fn client(&self) -> &BaseConsumer<AuthContext> {
        let _ = self.inner.poll(Duration::ZERO);
        &self.inner
    }

    /// The offsets the client's consumer group has committed for these partitions,
    /// where it has one. Empty when the client has no group or the broker does not
    /// answer: the group's offsets are a hint ([`crate::kafka::source::commit_positions`]),
    /// and a job without them starts at `kafkaReadOffset`.
    pub async fn committed(&self, partitions: &[i32]) -> BTreeMap<i32, i64> {
        let m = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::new();
            for p in &partitions {
                tpl.add_partition(&m.topic, *p);
            }
            let Ok(committed) = m.client().committed_offsets(tpl, Duration::from_secs(10)) else {
                return BTreeMap::new();
            };
            partitions
                .into_iter()
                .filter_map(|p| match committed.find_partition(&m.topic, p)?.offset() {
                    Offset::Offset(o) if o >= 0 => Some((p, o)),
                    _ => None,
                })
                .collect()
        })
        .await
        .expect("committed offsets task")
    }

    fn err(&self, message: String) -> KafkaError {
        KafkaError::Broker { bootstrap: self.bootstrap.clone(), topic: self.topic.clone(), message }
    }

    /// The topic's partitions, sorted.
    pub async fn partitions(&self) -> Result<Vec<i32>, KafkaError> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || m.partitions_blocking()).await.expect("metadata task")
    }

    fn partitions_blocking(&self) -> Result<Vec<i32>, KafkaError> {
        let md = self
            .client()
            .fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            .map_err(|e| self.err(format!("broker unreachable or metadata failed: {e}")))?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .ok_or_else(|| self.err("topic not in metadata".into()))?;
        if let Some(e) = t.error() {
            return Err(self.err(format!("topic error: {e:?} (does the topic exist?)")));
        }
        let mut ps: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        if ps.is_empty() {
            return Err(self.err("topic has no partitions (does it exist?)".into()));
        }
        ps.sort_unstable();
        Ok(ps)
    }

    /// The topic's id (KIP-516, base64), or None when the broker gives none
    /// ([`super::lineage::topic_id`]).
    pub async fn topic_id(&self) -> Result<Option<String>, KafkaError> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || super::lineage::topic_id(m.client(), &m.topic).map_err(|e| m.err(e)))
            .await
            .expect("topic id task")
    }

    /// Every topic the broker lists (internal ones, `__`-prefixed, left out), sorted: for
    /// a job that reads the topics a pattern matches.
    pub async fn topics(&self) -> Result<Vec<String>, KafkaError> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || {
            let md = m
                .client()
                .fetch_metadata(None, Duration::from_secs(10))
                .map_err(|e| m.err(format!("broker unreachable or metadata failed: {e}")))?;
            let mut names: Vec<String> =
                md.topics().iter().map(|t| t.name().to_string()).filter(|n| !n.starts_with("__")).collect();
            names.sort_unstable();
            Ok(names)
        })
        .await
        .expect("metadata task")
    }

    /// The low watermark (earliest offset still stored) of every partition, in one
    /// ListOffsets request.
    pub async fn low_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        self.offsets_at(partitions, Offset::Beginning).await
    }

    /// The high watermark (next offset to be written) of every partition, in one
    /// ListOffsets request.
    pub async fn high_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        self.offsets_at(partitions, Offset::End).await
    }

    async fn offsets_at(&self, partitions: &[i32], at: Offset) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let m = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || m.list_offsets(&partitions, at)).await.expect("watermark task")
    }

    /// Low and high watermarks of every partition: two ListOffsets requests for all of
    /// them (earliest, then latest), where asking partition by partition costs two each.
    /// Both are asked at the client's isolation level, as librdkafka's own watermark query
    /// asks them.
    pub async fn watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, (i64, i64)>, KafkaError> {
        let m = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            let low = m.list_offsets(&partitions, Offset::Beginning)?;
            let high = m.list_offsets(&partitions, Offset::End)?;
            Ok(partitions.iter().map(|p| (*p, (low[p], high[p]))).collect())
        })
        .await
        .expect("watermark task")
    }

    /// Each partition's offset at `at` (`Beginning` or `End`), in one ListOffsets request
    /// per leader (librdkafka's `offsets_for_times`, which sends `at` as the timestamp).
    /// Kafka's protocol guide, ListOffsets ("Offset API"): the timestamp is "Used to ask
    /// for all messages before a certain time (ms). There are two special values. Specify
    /// -1 to receive the latest offset (i.e. the offset of the next coming message) and -2
    /// to receive the earliest available offset."
    /// (<https://cwiki.apache.org/confluence/display/KAFKA/A+Guide+To+The+Kafka+Protocol>).
    /// librdkafka's own watermark query sends the same two values; the integration test
    /// `the_metadata_client_reads_watermarks_and_the_groups_committed_offsets` checks that
    /// the local broker answers both alike.
    fn list_offsets(&self, partitions: &[i32], at: Offset) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(&self.topic, *p, at).map_err(|e| self.err(format!("partition {p}: {e}")))?;
        }
        let found = self
            .client()
            .offsets_for_times(tpl, Duration::from_secs(10))
            .map_err(|e| self.err(format!("watermarks of partitions {partitions:?}: {e}")))?;
        partitions
            .iter()
            .map(|p| {
                let e = found
                    .find_partition(&self.topic, *p)
                    .ok_or_else(|| self.err(format!("watermarks of partition {p}: not in the answer")))?;
                e.error().map_err(|e| self.err(format!("watermarks of partition {p}: {e}")))?;
                match e.offset() {
                    Offset::Offset(o) if o >= 0 => Ok((*p, o)),
                    other => Err(self.err(format!("watermarks of partition {p}: the broker answered {other:?}"))),
                }
            })
            .collect()
    }
}
