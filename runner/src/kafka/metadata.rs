//! [`Metadata`]: one long-lived librdkafka client per job for the topic's partitions and
//! watermarks. The autoscaler, partition discovery and the dashboard read these every
//! few seconds; a new client each time would open new broker connections each time.

use super::connection::Connection;
use super::KafkaError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often a running job looks for partitions added to its topic (both templates).
pub const PARTITION_DISCOVERY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Partition and watermark lookups for one topic, on one shared client. Cheap to clone.
#[derive(Clone)]
pub struct Metadata {
    client: Arc<BaseConsumer>,
    bootstrap: String,
    topic: String,
}

impl Metadata {
    /// A client for `topic`.
    pub fn new(conn: &Connection, topic: &str) -> Result<Metadata, KafkaError> {
        let client: BaseConsumer = conn.client("a metadata client", &[])?;
        Ok(Metadata { client: Arc::new(client), bootstrap: conn.bootstrap.clone(), topic: topic.to_string() })
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
            .client
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

    /// Every topic the broker lists (internal ones, `__`-prefixed, left out), sorted: for
    /// a job that reads the topics a pattern matches.
    pub async fn topics(&self) -> Result<Vec<String>, KafkaError> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || {
            let md = m
                .client
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

    /// The low watermark (earliest offset still stored) of every partition.
    pub async fn low_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        Ok(self.watermarks(partitions).await?.into_iter().map(|(p, (lo, _))| (p, lo)).collect())
    }

    /// The high watermark (next offset to be written) of every partition.
    pub async fn high_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        Ok(self.watermarks(partitions).await?.into_iter().map(|(p, (_, hi))| (p, hi)).collect())
    }

    /// Low and high watermarks of every partition.
    pub async fn watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, (i64, i64)>, KafkaError> {
        let m = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            partitions
                .into_iter()
                .map(|p| {
                    m.client
                        .fetch_watermarks(&m.topic, p, Duration::from_secs(10))
                        .map(|w| (p, w))
                        .map_err(|e| m.err(format!("watermarks of partition {p}: {e}")))
                })
                .collect()
        })
        .await
        .expect("watermark task")
    }
}
