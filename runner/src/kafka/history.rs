//! A topic's history: every stored message from each partition's low watermark to its
//! high watermark as they stood at the start, read once (`flexrun local topic-rates`).
//!
//! The reader commits nothing and joins no group (manual assignment), so it disturbs no
//! consumer of the topic.

use super::connection::Connection;
use super::metadata::Metadata;
use super::KafkaError;
use crate::kafka::oauth::AuthContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one pass over a topic found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistoryStats {
    /// Messages read.
    pub messages: u64,
    /// Messages without a timestamp (left out of the rates).
    pub without_timestamp: u64,
}

/// How long the reader waits for the broker without a message before it gives up.
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// Read every message of `topic` stored when the call starts, calling `each(timestamp
/// ms, value bytes)` for those with a timestamp and `progress(read, total)` now and then.
pub async fn read_topic(
    conn: &Connection,
    topic: &str,
    each: impl FnMut(i64, u64) + Send + 'static,
    progress: impl Fn(u64, u64) + Send + 'static,
) -> Result<HistoryStats, KafkaError> {
    let md = Metadata::new(conn, topic)?;
    let parts = md.partitions().await?;
    let marks = md.watermarks(&parts).await?;
    let consumer: BaseConsumer<AuthContext> = conn.reader(
        "a history reader",
        &[("group.id", "flexrun-topic-rates"), ("enable.auto.commit", "false"), ("enable.partition.eof", "false")],
    )?;
    let (bootstrap, topic) = (conn.bootstrap.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || read_blocking(&consumer, &bootstrap, &topic, &marks, each, progress))
        .await
        .expect("history task")
}

fn read_blocking(
    consumer: &BaseConsumer<AuthContext>,
    bootstrap: &str,
    topic: &str,
    marks: &BTreeMap<i32, (i64, i64)>,
    mut each: impl FnMut(i64, u64),
    progress: impl Fn(u64, u64),
) -> Result<HistoryStats, KafkaError> {
    let err = |message: String| KafkaError::Broker { bootstrap: bootstrap.into(), topic: topic.into(), message };
    let mut left: BTreeMap<i32, i64> =
        marks.iter().filter(|(_, (lo, hi))| hi > lo).map(|(p, (_, hi))| (*p, *hi)).collect();
    let total: u64 = marks.values().map(|(lo, hi)| (hi - lo).max(0) as u64).sum();
    let mut tpl = TopicPartitionList::new();
    for p in left.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Offset(marks[p].0)).map_err(|e| err(e.to_string()))?;
    }
    consumer.assign(&tpl).map_err(|e| err(format!("cannot assign partitions: {e}")))?;
    let mut stats = HistoryStats::default();
    let mut last_message = Instant::now();
    while !left.is_empty() {
        let Some(r) = consumer.poll(Duration::from_millis(200)) else {
            // Offsets can end in a gap (a transaction marker, compaction): a partition
            // whose position reached its high watermark is done too.
            if let Ok(pos) = consumer.position() {
                for e in pos.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        if left.get(&e.partition()).is_some_and(|hi| o >= *hi) {
                            left.remove(&e.partition());
                        }
                    }
                }
            }
            if last_message.elapsed() > STALL_LIMIT {
                return Err(err(format!("no message for {STALL_LIMIT:?} with {} partitions unfinished", left.len())));
            }
            continue;
        };
        let m = r.map_err(|e| err(format!("reading: {e}")))?;
        last_message = Instant::now();
        stats.messages += 1;
        match m.timestamp().to_millis() {
            Some(ts) => each(ts, m.payload_len() as u64),
            None => stats.without_timestamp += 1,
        }
        if left.get(&m.partition()).is_some_and(|hi| m.offset() + 1 >= *hi) {
            left.remove(&m.partition());
        }
        if stats.messages % 10_000 == 0 {
            progress(stats.messages, total);
        }
    }
    progress(stats.messages, total);
    Ok(stats)
}
