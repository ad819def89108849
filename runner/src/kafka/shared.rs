//! One consumer for all the shards of a worker (issue 29, step 2).
//!
//! A shard used to own a librdkafka consumer, so eight shards on one worker meant eight
//! clients, each with its own threads, fetch requests and queue locks. Now a worker has
//! one [`SharedConsumer`], and a shard takes its partitions with
//! [`SharedConsumer::take`]:
//! - each partition's queue (`rd_kafka_queue_get_partition`) is split off before the
//!   partition is assigned, so none of its messages reaches the consumer's main queue
//!   (what `StreamConsumer::split_partition_queue` does);
//! - the shard takes what is ready from its partitions' queues up to a burst at a time
//!   (`rd_kafka_consume_batch_queue`), and librdkafka wakes it when one of them gets a
//!   message after being empty;
//! - the partitions are added with `incremental_assign`, which leaves the other shards'
//!   partitions alone (flexrun assigns partitions by hand, with no group protocol, so
//!   librdkafka allows it);
//! - dropping the shard's [`Partitions`] removes them again (`incremental_unassign`).
//!
//! librdkafka's rule for split queues is that the main queue must still be polled "to
//! serve events": a task does that, and logs and counts the client-level errors that
//! arrive there (a broker going away). A partition's own errors (an offset reset) reach
//! the shard on its queue, as they did on its own consumer.
//!
//! Moving a partition to another offset (a replay, then the batch after it; a skipped
//! gap) is `incremental_unassign` then `incremental_assign`: the fetch stop bumps the
//! partition's version, so messages fetched for the old position are discarded, as
//! with `assign` on a shard's own consumer.
//!
//! `runner/examples/bare_consumer.rs` measures these choices without any processing:
//! `split8` (one consumer, eight split queues, rdkafka's streams) and `batch1` (one
//! consumer read a burst at a time) against one and eight consumers polled message by
//! message (BENCHMARKS.md, "Hot path").

use super::{KafkaError, SourceSettings};
use crate::retry::{note_retry, Service};
use rdkafka::bindings as rdsys;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError as ReadError;
use rdkafka::message::{Header, Message, OwnedHeaders, Timestamp};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::ffi::{c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One worker's consumer, shared by the shards it runs.
pub struct SharedConsumer {
    consumer: Arc<super::source::Consumer>,
    topic: String,
    serve: tokio::task::JoinHandle<()>,
}

impl SharedConsumer {
    /// A consumer for `source` (the settings of a shard's consumer, with `extra` on top:
    /// the memory budget's prefetch limits), with a task that serves its main queue.
    /// `worker` names it in logs.
    pub fn new(
        source: &SourceSettings,
        worker: u32,
        extra: &[(&str, String)],
    ) -> Result<Arc<SharedConsumer>, KafkaError> {
        let consumer = Arc::new(source.consumer_with(extra)?);
        let c = consumer.clone();
        let serve = tokio::spawn(async move {
            loop {
                match c.recv().await {
                    Ok(m) => tracing::error!(
                        worker,
                        partition = m.partition(),
                        offset = m.offset(),
                        "a message reached the worker consumer's main queue, which no shard reads"
                    ),
                    Err(e) => {
                        tracing::warn!(worker, error = %e, "Kafka consumer error (librdkafka retries)");
                        note_retry(Service::Broker);
                    }
                }
            }
        });
        Ok(Arc::new(SharedConsumer { consumer, topic: source.topic.clone(), serve }))
    }

    /// Take the partitions of `positions` for one shard, each read from its offset.
    pub fn take(self: &Arc<Self>, positions: &BTreeMap<i32, i64>) -> Result<Partitions, KafkaError> {
        let all: Vec<i32> = positions.keys().copied().collect();
        self.take_some(&all, positions)
    }

    /// Split off the queues of all of one shard's `partitions`, and read those of
    /// `positions` (some of them) from their offsets: the others can be assigned later
    /// ([`Partitions::assign`]). A partition assigned without its queue split first would
    /// have its messages go to the worker's main queue, which no shard reads.
    pub fn take_some(
        self: &Arc<Self>,
        partitions: &[i32],
        positions: &BTreeMap<i32, i64>,
    ) -> Result<Partitions, KafkaError> {
        let rk = self.consumer.client().native_ptr();
        let topic = CString::new(self.topic.as_str()).map_err(|e| KafkaError::Config(e.to_string()))?;
        let wake = Arc::new(Notify::new());
        let mut queues = Vec::new();
        for p in partitions {
            // SAFETY: `rk` lives as long as `self.consumer`, which the Partitions keep;
            // a null queue (an unknown partition) is refused below.
            let q = unsafe { rdsys::rd_kafka_queue_get_partition(rk, topic.as_ptr(), *p) };
            if q.is_null() {
                let what = format!("{} partition {p}: librdkafka gave no queue for it", self.topic);
                return Err(KafkaError::Config(what));
            }
            // Before the partition is assigned: forwarded nowhere, and so marked as the
            // application's that the fetch start does not forward it to the consumer's
            // queue (what `split_partition_queue` does). Not forwarded into one queue
            // of the shard's either: every fetch stop (a re-assign) drops a forward.
            // SAFETY: a live queue; the callback reads `wake`, which the Partitions keep
            // alive until they turn the callback off (in Drop).
            unsafe {
                rdsys::rd_kafka_queue_forward(q, std::ptr::null_mut());
                rdsys::rd_kafka_queue_cb_event_enable(q, Some(wake_up), Arc::as_ptr(&wake) as *mut c_void);
            }
            queues.push(Queue(q));
        }
        let parts = Partitions {
            shared: self.clone(),
            split: partitions.to_vec(),
            queues,
            next: AtomicUsize::new(0),
            wake,
            assigned: Mutex::new(Vec::new()),
        };
        parts.assign(positions)?;
        Ok(parts)
    }

    fn list(&self, positions: impl IntoIterator<Item = (i32, Offset)>) -> Result<TopicPartitionList, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in positions {
            tpl.add_partition_offset(&self.topic, p, o)
                .map_err(|e| KafkaError::Config(format!("partition {p} offset {o:?}: {e}")))?;
        }
        Ok(tpl)
    }
}

impl Drop for SharedConsumer {
    fn drop(&mut self) {
        self.serve.abort();
    }
}

/// A librdkafka queue handle this module owns.
struct Queue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queue functions may be called from any thread.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: the handle came from librdkafka and is destroyed once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

/// librdkafka calls this on one of its threads when a partition's queue goes from empty
/// to non-empty.
unsafe extern "C" fn wake_up(_rk: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the Partitions' Notify, alive while the callback is on.
    unsafe { (*(opaque as *const Notify)).notify_one() }
}

/// One shard's partitions on its worker's [`SharedConsumer`], each read from its own
/// queue.
///
/// Messages are taken up to a burst at a time with `rd_kafka_consume_batch_queue`
/// ([`Partitions::take_ready`]): one lock and one clock read per burst, where taking
/// them one by one through rdkafka's stream polled the queue, read the clock twice and
/// set up an event per message (`runner/examples/bare_consumer.rs batch1` against `1`).
pub struct Partitions {
    shared: Arc<SharedConsumer>,
    /// Each partition's own queue.
    queues: Vec<Queue>,
    /// The partitions those queues are of: only these may be assigned.
    split: Vec<i32>,
    /// The queue the next burst starts at, so no partition waits behind a busy one.
    next: AtomicUsize,
    /// Woken by librdkafka when a queue gets a message.
    wake: Arc<Notify>,
    /// The partitions in the consumer's assignment now.
    assigned: Mutex<Vec<i32>>,
}

/// One message, or a partition's error, taken from a shard's queue and owned: the key
/// and value stay in librdkafka's fetch buffer until it is dropped (issue 29, step 3:
/// a batch holds its messages instead of copying them out).
///
/// librdkafka requires every message to be destroyed before its consumer is closed:
/// who keeps a `Held` past [`Partitions::take_ready`] keeps the
/// [`Partitions::consumer`] too (`kafka_to_bq::run::records::Records` does).
pub struct Held(NonNull<rdsys::rd_kafka_message_t>);

// SAFETY: a message is read-only once librdkafka hands it out, and may be read and
// destroyed from any thread.
unsafe impl Send for Held {}
// SAFETY: as above; nothing mutates it through a shared reference.
unsafe impl Sync for Held {}

impl Held {
    /// The message's fields, borrowed from it.
    pub fn view(&self) -> Fetched<'_> {
        // SAFETY: the message lives until this Held is dropped.
        Fetched(unsafe { self.0.as_ref() })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: a message librdkafka returned, destroyed once, after its last use.
        unsafe { rdsys::rd_kafka_message_destroy(self.0.as_ptr()) }
    }
}

/// A [`Held`] message's fields, borrowed for as long as the message.
#[derive(Clone, Copy)]
pub struct Fetched<'a>(&'a rdsys::rd_kafka_message_t);

impl<'a> Fetched<'a> {
    /// The error this stands for, if it is one (an offset reset, say).
    pub fn error(&self) -> Option<ReadError> {
        (self.0.err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR)
            .then(|| ReadError::MessageConsumption(self.0.err.into()))
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.0.partition
    }

    /// The offset.
    pub fn offset(&self) -> i64 {
        self.0.offset
    }

    /// The leader epoch the record was written in (KIP-320; -1 when the broker gives none).
    pub fn leader_epoch(&self) -> i32 {
        super::lineage::message_epoch(self.0)
    }

    fn bytes(ptr: *mut c_void, len: usize) -> Option<&'a [u8]> {
        // SAFETY: librdkafka's pointer and length for a message that lives for 'a.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
    }

    /// The value (None for a null value).
    pub fn payload(&self) -> Option<&'a [u8]> {
        Self::bytes(self.0.payload, self.0.len)
    }

    /// The key (None for a null key).
    pub fn key(&self) -> Option<&'a [u8]> {
        Self::bytes(self.0.key, self.0.key_len)
    }

    /// The timestamp and its kind.
    pub fn timestamp(&self) -> Timestamp {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message.
        let ts = unsafe { rdsys::rd_kafka_message_timestamp(self.0, &mut kind) };
        match kind {
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => Timestamp::NotAvailable,
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(ts),
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => Timestamp::LogAppendTime(ts),
        }
    }

    /// A copy of the headers, when there are any.
    pub fn headers(&self) -> Option<OwnedHeaders> {
        let mut h = std::ptr::null_mut();
        // SAFETY: a live message; the headers belong to it.
        let err = unsafe { rdsys::rd_kafka_message_headers(self.0, &mut h) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || h.is_null() {
            return None;
        }
        // SAFETY: `h` is the message's header list.
        let count = unsafe { rdsys::rd_kafka_header_cnt(h) };
        let mut owned = OwnedHeaders::new_with_capacity(count);
        for i in 0..count {
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            // SAFETY: index below the count; the pointers live as long as the message.
            unsafe {
                if rdsys::rd_kafka_header_get_all(h, i, &mut name, &mut value, &mut size)
                    != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    continue;
                }
                let key = CStr::from_ptr(name).to_string_lossy();
                let value = Self::bytes(value as *mut c_void, size);
                owned = owned.insert(Header { key: &key, value });
            }
        }
        Some(owned)
    }
}

impl Partitions {
    /// Read each partition of `positions` from its offset; the shard's other
    /// partitions are left out of the assignment until the next call.
    pub fn assign(&self, positions: &BTreeMap<i32, i64>) -> Result<(), KafkaError> {
        let topic = &self.shared.topic;
        if let Some(p) = positions.keys().find(|p| !self.split.contains(p)) {
            // Its messages would reach the worker's main queue, which no shard reads.
            return Err(KafkaError::Config(format!("{topic} partition {p} has no queue of this shard's")));
        }
        let mut assigned = self.assigned.lock().expect("assignment lock");
        if !assigned.is_empty() {
            let old = self.shared.list(assigned.iter().map(|p| (*p, Offset::Invalid)))?;
            self.shared
                .consumer
                .incremental_unassign(&old)
                .map_err(|e| KafkaError::Config(format!("unassign partitions of {topic}: {e}")))?;
            assigned.clear();
        }
        let new = self.shared.list(positions.iter().map(|(p, o)| (*p, Offset::Offset(*o))))?;
        self.shared
            .consumer
            .incremental_assign(&new)
            .map_err(|e| KafkaError::Config(format!("assign partitions of {topic}: {e}")))?;
        assigned.extend(positions.keys());
        Ok(())
    }

    /// Hand `each` up to `max` (at most 1,024) messages or errors that are ready,
    /// without waiting, in the order librdkafka queued them. Returns how many. Each is
    /// handed over as a [`Held`] message: kept, it stays in librdkafka's fetch buffer
    /// with no copy; dropped, it is destroyed.
    pub fn take_ready(&self, max: usize, mut each: impl FnMut(Held)) -> usize {
        let mut buf = [std::ptr::null_mut::<rdsys::rd_kafka_message_t>(); 1024];
        let max = max.clamp(1, buf.len());
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut taken = 0;
        for i in 0..self.queues.len() {
            let q = &self.queues[(first + i) % self.queues.len()];
            // SAFETY: librdkafka fills at most `max - taken` slots with messages the
            // caller owns.
            let n = unsafe { rdsys::rd_kafka_consume_batch_queue(q.0, 0, buf.as_mut_ptr(), max - taken) };
            let n = n.max(0) as usize;
            for m in &buf[..n] {
                // A message librdkafka returned (never null), owned from here on.
                each(Held(NonNull::new(*m).expect("librdkafka returned a null message")));
            }
            taken += n;
            if taken == max {
                break;
            }
        }
        taken
    }

    /// The worker consumer these partitions are read from: whoever keeps a [`Held`]
    /// message keeps this too, so that the consumer is closed only after the message
    /// is destroyed, as librdkafka requires.
    pub fn consumer(&self) -> &Arc<SharedConsumer> {
        &self.shared
    }

    /// Wait until a message may be ready, at most `limit`; false when the time ran out.
    pub async fn wait(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.wake.notified()).await.is_ok()
    }

    /// Commit processed positions to the consumer group (informational).
    pub fn commit(&self, positions: &BTreeMap<i32, i64>) {
        super::source::commit_positions(&self.shared.consumer, &self.shared.topic, positions);
    }
}

impl Drop for Partitions {
    fn drop(&mut self) {
        let assigned = self.assigned.get_mut().expect("assignment lock");
        if !assigned.is_empty() {
            let unassign = self.shared.list(assigned.iter().map(|p| (*p, Offset::Invalid))).and_then(|old| {
                self.shared.consumer.incremental_unassign(&old).map_err(|e| KafkaError::Config(e.to_string()))
            });
            if let Err(e) = unassign {
                tracing::warn!(topic = %self.shared.topic, partitions = ?assigned, error = %e, "could not remove a shard's partitions from its worker's consumer");
            }
        }
        for q in &self.queues {
            // SAFETY: a live queue; after this no callback reads `wake`.
            unsafe { rdsys::rd_kafka_queue_cb_event_enable(q.0, None, std::ptr::null_mut()) };
        }
    }
}
