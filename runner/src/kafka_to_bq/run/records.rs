//! A batch's Kafka records. Those a shard takes from its queues are kept as librdkafka
//! handed them ([`Held`]): the key and value are read where librdkafka fetched them,
//! with no copy (issue 29, step 3), and a record's headers are parsed only when
//! something asks for them (a dead-letter row, a `headers` metadata column, CDC).
//! Records from elsewhere ([`Records::push`]) are copied into one byte buffer that the
//! shard reuses batch after batch.
//!
//! ```
//! use flexrun::kafka_to_bq::run::records::Records;
//! use rdkafka::message::{Message, OwnedMessage, Timestamp};
//! let m = |p, o| OwnedMessage::new(Some(b"v".to_vec()), None, "t".into(), Timestamp::NotAvailable, p, o, None);
//! let mut r = Records::default();
//! r.push(&m(1, 7));
//! r.push(&m(0, 9));
//! r.sort_by_position();
//! assert_eq!(r.iter().map(|m| (m.partition(), m.offset())).collect::<Vec<_>>(), [(0, 9), (1, 7)]);
//! assert_eq!(r.get(0).unwrap().payload(), Some(&b"v"[..]));
//! ```

use crate::kafka::shared::{Held, SharedConsumer};
use rdkafka::message::{Headers, Message, OwnedHeaders, Timestamp};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// The records of one batch.
#[derive(Default)]
pub struct Records {
    buf: Vec<u8>,
    items: Vec<Item>,
    topics: Vec<String>,
    /// The consumers the held messages came from (one, as a shard reads one), dropped
    /// after them (`items` is declared first, so it is dropped first): librdkafka
    /// requires every message to be destroyed before its consumer is closed.
    consumers: Vec<Arc<SharedConsumer>>,
}

struct Item {
    topic: usize,
    partition: i32,
    offset: i64,
    timestamp: Timestamp,
    /// The leader epoch the record was written in (-1: unknown, a copied record).
    epoch: i32,
    body: Body,
    /// The headers, read from a held message when first asked for.
    headers: OnceLock<Option<OwnedHeaders>>,
}

/// Where a record's key and value are.
enum Body {
    /// In [`Records::buf`].
    Copied { key: Option<Range<usize>>, payload: Option<Range<usize>> },
    /// In librdkafka's fetch buffer.
    Held(Held),
}

/// One record of [`Records`], read through rdkafka's [`Message`] trait.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    item: &'a Item,
    buf: &'a [u8],
    topic: &'a str,
}

impl Records {
    /// Copy `m` in.
    pub fn push<M: Message>(&mut self, m: &M) {
        let topic = self.topic_index(m.topic());
        let key = m.key().map(|k| self.copy(k));
        let payload = m.payload().map(|p| self.copy(p));
        let headers = m.headers().map(|h| {
            h.iter().fold(OwnedHeaders::new_with_capacity(h.count()), |owned, x| {
                owned.insert(rdkafka::message::Header { key: x.key, value: x.value })
            })
        });
        let (partition, offset, timestamp) = (m.partition(), m.offset(), m.timestamp());
        let (body, headers) = (Body::Copied { key, payload }, OnceLock::from(headers));
        self.items.push(Item { topic, partition, offset, timestamp, epoch: -1, body, headers });
    }

    /// Keep a message of `topic` taken from a shard's queue on `consumer`, as it is.
    pub fn push_held(&mut self, topic: &str, m: Held, consumer: &Arc<SharedConsumer>) {
        if !self.consumers.iter().any(|c| Arc::ptr_eq(c, consumer)) {
            self.consumers.push(consumer.clone());
        }
        let topic = self.topic_index(topic);
        let f = m.view();
        let (partition, offset, timestamp, epoch) = (f.partition(), f.offset(), f.timestamp(), f.leader_epoch());
        let headers = OnceLock::new();
        self.items.push(Item { topic, partition, offset, timestamp, epoch, body: Body::Held(m), headers });
    }

    fn topic_index(&mut self, topic: &str) -> usize {
        if self.topics.last().is_some_and(|t| t == topic) {
            return self.topics.len() - 1;
        }
        match self.topics.iter().position(|t| t == topic) {
            Some(i) => i,
            None => {
                self.topics.push(topic.to_string());
                self.topics.len() - 1
            }
        }
    }

    fn copy(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        start..self.buf.len()
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Record `i`; panics past the end, as indexing does.
    pub fn at(&self, i: usize) -> Record<'_> {
        self.record(&self.items[i])
    }

    /// Record `i`.
    pub fn get(&self, i: usize) -> Option<Record<'_>> {
        self.items.get(i).map(|item| self.record(item))
    }

    fn record<'a>(&'a self, item: &'a Item) -> Record<'a> {
        Record { item, buf: &self.buf, topic: &self.topics[item.topic] }
    }

    /// The records in order.
    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.items.iter().map(|item| self.record(item))
    }

    /// Sort by partition, then offset (only the index moves, not the bytes).
    pub fn sort_by_position(&mut self) {
        self.items.sort_by_key(|i| (i.partition, i.offset));
    }

    /// Empty it (releasing held messages), keeping its capacity for the next batch.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
    }
}

impl<'a> Record<'a> {
    /// The key, borrowed for as long as the batch (the trait's borrows last only as
    /// long as this view).
    pub fn key(&self) -> Option<&'a [u8]> {
        match &self.item.body {
            Body::Copied { key, .. } => key.clone().map(|r| &self.buf[r]),
            Body::Held(h) => h.view().key(),
        }
    }

    /// The payload, borrowed for as long as the batch.
    pub fn payload(&self) -> Option<&'a [u8]> {
        match &self.item.body {
            Body::Copied { payload, .. } => payload.clone().map(|r| &self.buf[r]),
            Body::Held(h) => h.view().payload(),
        }
    }

    /// The leader epoch the record was written in (-1 when unknown).
    pub fn leader_epoch(&self) -> i32 {
        self.item.epoch
    }

    /// The topic, borrowed for as long as the batch.
    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// The headers, borrowed for as long as the batch.
    pub fn headers(&self) -> Option<&'a OwnedHeaders> {
        let item = self.item;
        item.headers
            .get_or_init(|| match &item.body {
                Body::Held(h) => h.view().headers(),
                Body::Copied { .. } => None,
            })
            .as_ref()
    }
}

impl Message for Record<'_> {
    type Headers = OwnedHeaders;

    fn key(&self) -> Option<&[u8]> {
        Record::key(self)
    }

    fn payload(&self) -> Option<&[u8]> {
        Record::payload(self)
    }

    /// Records are read-only: always None.
    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        None
    }

    fn topic(&self) -> &str {
        Record::topic(self)
    }

    fn partition(&self) -> i32 {
        self.item.partition
    }

    fn offset(&self) -> i64 {
        self.item.offset
    }

    fn timestamp(&self) -> Timestamp {
        self.item.timestamp
    }

    fn headers(&self) -> Option<&OwnedHeaders> {
        Record::headers(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedMessage};

    #[test]
    fn a_record_reads_back_as_the_message_it_copied_and_clear_keeps_capacity() {
        let headers = OwnedHeaders::new()
            .insert(Header { key: "op", value: Some("u") })
            .insert(Header::<&[u8]> { key: "none", value: None });
        let msgs = [
            OwnedMessage::new(
                Some(b"{}".to_vec()),
                Some(b"k".to_vec()),
                "a".into(),
                Timestamp::CreateTime(5),
                3,
                10,
                Some(headers),
            ),
            OwnedMessage::new(None, None, "b".into(), Timestamp::LogAppendTime(6), 0, 11, None),
            OwnedMessage::new(Some(vec![]), None, "a".into(), Timestamp::NotAvailable, 3, 2, None),
        ];
        let mut r = Records::default();
        for m in &msgs {
            r.push(m);
        }
        for (m, got) in msgs.iter().zip(r.iter()) {
            assert_eq!((got.key(), got.payload(), got.topic()), (m.key(), m.payload(), m.topic()));
            assert_eq!((got.partition(), got.offset(), got.timestamp()), (m.partition(), m.offset(), m.timestamp()));
            let hs = |h: Option<&OwnedHeaders>| {
                h.map(|h| h.iter().map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec))).collect::<Vec<_>>())
            };
            assert_eq!(hs(got.headers()), hs(m.headers()));
        }
        r.sort_by_position();
        assert_eq!(r.iter().map(|m| (m.partition(), m.offset())).collect::<Vec<_>>(), [(0, 11), (3, 2), (3, 10)]);
        assert_eq!(r.get(2).unwrap().key(), Some(&b"k"[..]));
        let cap = r.buf.capacity();
        r.clear();
        assert!(r.is_empty() && r.get(0).is_none());
        assert_eq!(r.buf.capacity(), cap);
    }
}
