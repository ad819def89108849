//! One consumer per worker (`kafka::shared`) against the broker: two shards' partitions on
//! one librdkafka consumer each get exactly their own messages, in order, taken a burst
//! at a time, and no more than asked for; moving a
//! shard's partitions to other offsets discards what was fetched for the old ones; and
//! partitions given back can be taken again by a new owner on the same consumer.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::kafka::shared::{Partitions, SharedConsumer};
use flexrun::kafka::source::Isolation;
use flexrun::kafka::{Connection, SourceSettings};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::collections::BTreeMap;
use std::time::Duration;

const PER_PARTITION: i64 = 40;

/// `n` messages from `parts`, as (partition, offset, payload), a burst at a time.
async fn read(parts: &Partitions, n: usize) -> Vec<(i32, i64, String)> {
    let mut out = Vec::new();
    while out.len() < n {
        let taken = parts.take_ready(n - out.len(), |m| {
            let m = m.view();
            assert!(m.error().is_none(), "{:?}", m.error());
            out.push((
                m.partition(),
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            ));
        });
        if taken == 0 {
            assert!(answer("a message", parts.wait(Duration::from_secs(30))).await, "no message for 30 s");
        }
    }
    out
}

/// A worker consumer on `topic`, read from the earliest offsets, in a group of its own.
fn consumer(kafka: &str, topic: &str) -> std::sync::Arc<SharedConsumer> {
    let settings = SourceSettings {
        conn: Connection::plaintext(kafka),
        topic: topic.to_string(),
        group_id: unique(&format!("{topic}_group")),
        start_earliest: true,
        gap_policy: Default::default(),
        isolation: Isolation::ReadCommitted,
        group_offsets: true,
    };
    SharedConsumer::new(&settings, 0, &[]).expect("a consumer")
}

/// What partition `p` holds from `from` on: `p{p}-{offset}`, in order.
fn expected(p: i32, from: i64) -> Vec<(i32, i64, String)> {
    (from..PER_PARTITION).map(|o| (p, o, format!("p{p}-{o}"))).collect()
}

/// The messages of `got` on partition `p`.
fn of(got: &[(i32, i64, String)], p: i32) -> Vec<(i32, i64, String)> {
    got.iter().filter(|m| m.0 == p).cloned().collect()
}

#[tokio::test]
async fn shards_on_one_consumer_read_only_their_partitions_and_can_be_moved() {
    let s = stack();
    let topic = unique("shared_consumer");
    flexrun::kafka::create_topic(&s.kafka, &topic, 4).await.expect("create topic");
    let producer: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    for p in 0..4 {
        for o in 0..PER_PARTITION {
            let v = format!("p{p}-{o}");
            let r = FutureRecord::<(), str>::to(&topic).payload(&v).partition(p);
            answer("produce", producer.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).expect("produce");
        }
    }
    producer.flush(CALL_LIMIT).expect("flush");
    let shared = consumer(&s.kafka, &topic);

    // Two shards: partitions 0 and 1 from the start, partitions 2 (from 5) and 3.
    let a = shared.take(&BTreeMap::from([(0, 0), (1, 0)])).expect("shard a");
    let b = shared.take(&BTreeMap::from([(2, 5), (3, 0)])).expect("shard b");
    let got_a = read(&a, 2 * PER_PARTITION as usize).await;
    assert_eq!((of(&got_a, 0), of(&got_a, 1)), (expected(0, 0), expected(1, 0)), "shard a reads its own, in order");
    let got_b = read(&b, 2 * PER_PARTITION as usize - 5).await;
    assert_eq!((of(&got_b, 2), of(&got_b, 3)), (expected(2, 5), expected(3, 0)), "shard b reads its own, in order");

    // A replay moves shard a back to offset 10 of partition 0 only: what librdkafka
    // fetched before is discarded, and partition 1 is out of the assignment.
    a.assign(&BTreeMap::from([(0, 10)])).expect("move shard a");
    let again = read(&a, (PER_PARTITION - 10) as usize).await;
    assert_eq!(again, expected(0, 10));

    // Shard b stops; a new owner takes partition 2 on the same consumer from 0.
    drop(b);
    let b2 = shared.take(&BTreeMap::from([(2, 0)])).expect("partition 2 again");
    assert_eq!(read(&b2, PER_PARTITION as usize).await, expected(2, 0));
}

/// A batch keeps the messages librdkafka handed out (issue 29, step 3): their keys,
/// values and headers read back after the shard's partitions were moved and after the
/// shard and its consumer were dropped, with the batch the last to hold the consumer.
#[tokio::test]
async fn held_records_outlive_a_reassignment_and_keep_their_consumer_open() {
    use flexrun::kafka_to_bq::run::records::Records;
    use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
    let s = stack();
    let topic = unique("held_records");
    flexrun::kafka::create_topic(&s.kafka, &topic, 2).await.expect("create topic");
    let producer: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", &s.kafka).create().unwrap();
    for o in 0..20i32 {
        let (k, v) = (format!("k{o}"), format!("v{o}"));
        let h = OwnedHeaders::new().insert(Header { key: "n", value: Some(&format!("h{o}")) });
        let r = FutureRecord::to(&topic).key(&k).payload(&v).partition(o % 2).headers(h);
        answer("produce", producer.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).expect("produce");
    }
    let shared = consumer(&s.kafka, &topic);
    let parts = shared.take(&BTreeMap::from([(0, 0), (1, 0)])).expect("a shard");
    let mut records = Records::default();
    while records.len() < 20 {
        let taken = parts.take_ready(20 - records.len(), |m| {
            assert!(m.view().error().is_none());
            records.push_held(&topic, m, parts.consumer());
        });
        if taken == 0 {
            assert!(answer("a message", parts.wait(Duration::from_secs(30))).await, "no message for 30 s");
        }
    }
    // Move the partitions (a replay does), then drop the shard and the worker's handle:
    // the records still read what librdkafka fetched.
    parts.assign(&BTreeMap::from([(0, 5)])).expect("move");
    drop(parts);
    drop(shared);
    records.sort_by_position();
    let got: Vec<(i32, i64, String, String, String)> = records
        .iter()
        .map(|m| {
            let h = m.headers().expect("headers");
            let hv = h.iter().map(|x| String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned()).collect();
            let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
            (m.partition(), m.offset(), text(m.key()), text(m.payload()), hv)
        })
        .collect();
    let mut want: Vec<_> =
        (0..20).map(|o: i32| (o % 2, (o / 2) as i64, format!("k{o}"), format!("v{o}"), format!("h{o}"))).collect();
    want.sort_by_key(|w| (w.0, w.1));
    assert_eq!(got, want);
    // The last holder of the consumer: dropping it destroys the messages, then closes it.
    drop(records);
}
