//! [`SourceSettings`]: the topic a job reads, its group, where a fresh job starts, and
//! the consumers and positions built from them.

use super::connection::Connection;
use super::metadata::Metadata;
use super::KafkaError;
use rdkafka::consumer::{Consumer as _, StreamConsumer};

/// A stream consumer with flexrun's client context ([`super::oauth::AuthContext`]).
pub type Consumer = StreamConsumer<super::oauth::AuthContext>;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;

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
    /// `kafkaIsolationLevel`: whether records of open or aborted transactions are read.
    pub isolation: Isolation,
    /// Whether a partition without a checkpoint starts where the consumer group committed
    /// (the job's first start), or where `start_earliest` says whatever the group holds
    /// (a topic that joins a started job, a recreated topic: the group's offsets belong
    /// to another start, or to another log).
    pub group_offsets: bool,
}

/// Which records of transactional producers a job reads (`kafkaIsolationLevel`).
///
/// Kafka's consumer docs: with `read_committed`, "consumer.poll() will only return
/// transactional messages which have been committed", and reads stop at the last
/// stable offset while a transaction is open; `read_uncommitted` "will return all
/// messages, even transactional messages which have been aborted". Google's template
/// leaves the Java client's default, `read_uncommitted`; flexrun defaults to
/// `read_committed` (librdkafka's default), because an exactly-once sink that
/// writes aborted records is not exactly-once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Committed transactional records only (and every non-transactional one).
    #[default]
    ReadCommitted,
    /// Everything, aborted transactions included, as Google's template reads.
    ReadUncommitted,
}

impl Isolation {
    /// librdkafka's `isolation.level` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
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
    ("queued.min.messages", "20000"),
    // Fetch sizes are librdkafka's defaults: Kafka returns a record batch larger than
    // the partition's fetch size anyway ("If the first record batch in the first
    // non-empty partition of the fetch is larger than this limit, the batch will still
    // be returned to ensure that progress can be made", Kafka's consumer configs,
    // KIP-74), so a 15 MB record does not stall a shard.
    ("enable.partition.eof", "false"),
];

impl SourceSettings {
    /// A consumer for manual assignment (no auto commit, low fetch wait).
    pub fn consumer(&self) -> Result<Consumer, KafkaError> {
        self.consumer_with(&[])
    }

    /// [`SourceSettings::consumer`] with `extra` settings on top (a memory budget's
    /// prefetch limits, [`super::budget::Shares::consumer_settings`]).
    pub fn consumer_with(&self, extra: &[(&str, String)]) -> Result<Consumer, KafkaError> {
        let mut config = self.consumer_config();
        for (k, v) in extra {
            config.set(*k, v);
        }
        let c: Consumer = config
            .create_with_context(self.conn.context())
            .map_err(|e| self.broker_err(format!("cannot create a consumer: {e}")))?;
        super::oauth::seed(c.client()).map_err(|e| self.broker_err(e))?;
        Ok(c)
    }

    /// The settings of [`SourceSettings::consumer`]: the connection's, the group,
    /// the isolation level and [`SHARD_CONSUMER`].
    ///
    /// ```
    /// use flexrun::kafka::{source::Isolation, Connection, SourceSettings};
    /// let s = SourceSettings {
    ///     conn: Connection::plaintext("localhost:9092"),
    ///     topic: "t".into(),
    ///     group_id: "g".into(),
    ///     start_earliest: false,
    ///     gap_policy: Default::default(),
    ///     isolation: Isolation::ReadUncommitted,
    ///     group_offsets: true,
    /// };
    /// assert_eq!(s.consumer_config().get("isolation.level"), Some("read_uncommitted"));
    /// assert_eq!(s.consumer_config().get("auto.offset.reset"), Some("error"));
    /// ```
    pub fn consumer_config(&self) -> rdkafka::ClientConfig {
        let mut c = self.conn.config();
        c.set("group.id", &self.group_id).set("isolation.level", self.isolation.as_str());
        for (k, v) in SHARD_CONSUMER {
            c.set(*k, *v);
        }
        c
    }

    /// A metadata client for this topic in this consumer group (one per job; see
    /// [`Metadata`]).
    pub fn metadata(&self) -> Result<Metadata, KafkaError> {
        Metadata::for_group(&self.conn, &self.topic, &self.group_id)
    }

    /// The topic's partitions, sorted (a short-lived metadata client).
    pub async fn partitions(&self) -> Result<Vec<i32>, KafkaError> {
        self.metadata()?.partitions().await
    }

    fn broker_err(&self, message: String) -> KafkaError {
        KafkaError::Broker { bootstrap: self.conn.bootstrap.clone(), topic: self.topic.clone(), message }
    }

    /// Where partitions without a checkpoint start: the group's committed offset if it
    /// has one, else the earliest or latest offset (`kafkaReadOffset`), from `marks`
    /// (partition → low and high watermark). Asked on the job's metadata client, which
    /// carries the group ([`SourceSettings::metadata`]), so start-up opens no client
    /// of its own for it.
    pub async fn initial_positions(
        &self,
        metadata: &Metadata,
        partitions: &[i32],
        marks: &BTreeMap<i32, (i64, i64)>,
    ) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let committed = match self.group_offsets {
            true => metadata.committed(partitions).await,
            false => BTreeMap::new(),
        };
        partitions
            .iter()
            .map(|p| match committed.get(p) {
                Some(o) => Ok((*p, *o)),
                None => {
                    let (lo, hi) =
                        marks.get(p).ok_or_else(|| self.broker_err(format!("no watermarks for partition {p}")))?;
                    Ok((*p, if self.start_earliest { *lo } else { *hi }))
                }
            })
            .collect()
    }
}

/// Point `consumer` at `positions` (partition → next offset).
pub fn assign(consumer: &Consumer, topic: &str, positions: &BTreeMap<i32, i64>) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
            .map_err(|e| KafkaError::Config(format!("partition {p} offset {o}: {e}")))?;
    }
    consumer.assign(&tpl).map_err(|e| KafkaError::Config(format!("assign partitions of {topic}: {e}")))
}

/// Commit processed positions to the consumer group (informational).
pub fn commit_positions(consumer: &Consumer, topic: &str, positions: &BTreeMap<i32, i64>) {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(*o));
    }
    if let Err(e) = consumer.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
        tracing::warn!(topic, error = %e, "committing offsets to the consumer group failed (informational only)");
    }
}
