//! Which log a position belongs to: the topic's id and each partition's leader epoch.
//!
//! A topic name alone is not an identity. A topic deleted and created again under the
//! same name is a new log whose offsets start again at 0, and an unclean leader
//! election can replace the tail of a partition's log with other records at the same
//! offsets. A saved position means something only in the log it was read from, so
//! every saved position and commit carries:
//!
//! - the **topic id** (KIP-516): "a topic ID ... that is unique for the lifetime of the
//!   topic", so a recreated topic has another one. Asked with DescribeTopics
//!   (librdkafka's `rd_kafka_DescribeTopics`, [`topic_id`]).
//! - per partition, the **leader epoch** of the last record read (KIP-320:
//!   `rd_kafka_message_leader_epoch`). A position read at epoch `e` is still in the log
//!   if the current leader's log holds epoch `e` up to that position; OffsetForLeaderEpoch
//!   answers where epoch `e` ends. librdkafka sends it when a partition is sought to an
//!   offset that carries an epoch ("offset validation"), and on truncation seeks to
//!   that end, the point where the logs diverge ([`divergences`]).
//!
//! Both are checked on every start (`kafka_to_bq::setup::positions`): another topic id
//! is a new log, and a position past a divergence is a gap; `offsetGapPolicy` decides
//! both ([`super::gaps`]).

use super::connection::Connection;
use super::oauth::AuthContext;
use super::KafkaError;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

/// How long a start waits for the broker to describe a topic or validate positions.
pub const CHECK_LIMIT: Duration = Duration::from_secs(30);

/// A saved position with the epoch of the record read just before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochPosition {
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch of the record at `offset - 1` when it was read.
    pub epoch: i32,
}

/// The topic id of `topic` as Kafka prints it (base64), asked on `client` with
/// DescribeTopics. `None` when the broker gives none (a broker without topic ids
/// answers the zero id).
pub fn topic_id(client: &BaseConsumer<AuthContext>, topic: &str) -> Result<Option<String>, String> {
    let rk = client.client().native_ptr();
    let name = CString::new(topic).map_err(|e| e.to_string())?;
    // SAFETY: every handle made here is destroyed below, after its last use; the
    // result event owns the descriptions read from it.
    unsafe {
        let queue = rdsys::rd_kafka_queue_new(rk);
        let mut names = [name.as_ptr()];
        let topics = rdsys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
        let opts = rdsys::rd_kafka_AdminOptions_new(rk, rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
        let mut errbuf = [0 as std::ffi::c_char; 256];
        rdsys::rd_kafka_AdminOptions_set_request_timeout(
            opts,
            CHECK_LIMIT.as_millis() as i32,
            errbuf.as_mut_ptr(),
            errbuf.len(),
        );
        rdsys::rd_kafka_DescribeTopics(rk, topics, opts, queue);
        let ev = rdsys::rd_kafka_queue_poll(queue, CHECK_LIMIT.as_millis() as i32 + 5_000);
        let out = read_description(ev, topic);
        if !ev.is_null() {
            rdsys::rd_kafka_event_destroy(ev);
        }
        rdsys::rd_kafka_AdminOptions_destroy(opts);
        rdsys::rd_kafka_TopicCollection_destroy(topics);
        rdsys::rd_kafka_queue_destroy(queue);
        out
    }
}

/// The topic id in a DescribeTopics result event.
///
/// # Safety
/// `ev` is null or a live event from `rd_kafka_DescribeTopics`.
unsafe fn read_description(ev: *mut rdsys::rd_kafka_event_t, topic: &str) -> Result<Option<String>, String> {
    if ev.is_null() {
        return Err(format!("DescribeTopics({topic}) had no answer within {CHECK_LIMIT:?}"));
    }
    // SAFETY: a live event (the caller's contract).
    unsafe {
        if rdsys::rd_kafka_event_error(ev) != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("DescribeTopics({topic}): {}", c_text(rdsys::rd_kafka_event_error_string(ev))));
        }
        let res = rdsys::rd_kafka_event_DescribeTopics_result(ev);
        let mut n = 0usize;
        let descs = rdsys::rd_kafka_DescribeTopics_result_topics(res, &mut n);
        let Some(&d) = (n > 0).then(|| &*descs) else {
            return Err(format!("DescribeTopics({topic}): the answer names no topic"));
        };
        let err = rdsys::rd_kafka_TopicDescription_error(d);
        if !err.is_null() && rdsys::rd_kafka_error_code(err) != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("DescribeTopics({topic}): {}", c_text(rdsys::rd_kafka_error_string(err))));
        }
        let id = rdsys::rd_kafka_TopicDescription_topic_id(d);
        if id.is_null() {
            return Ok(None);
        }
        let text = c_text(rdsys::rd_kafka_Uuid_base64str(id));
        Ok((!is_zero_id(&text)).then_some(text))
    }
}

/// Kafka's zero UUID in base64 (`AAAAAAAAAAAAAAAAAAAAAA`): no id.
fn is_zero_id(id: &str) -> bool {
    id.bytes().all(|b| b == b'A' || b == b'=')
}

fn c_text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka's NUL-terminated strings, alive while their owner is.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The leader epoch a fetched record was written in (-1 when the broker gives none).
pub fn message_epoch(m: &rdsys::rd_kafka_message_t) -> i32 {
    // SAFETY: a live message, borrowed for the call.
    unsafe { rdsys::rd_kafka_message_leader_epoch(m) }
}

/// The partitions of `positions` whose log no longer holds what was read before the
/// position, and the offset where the current log diverges from it (KIP-320).
///
/// A consumer of its own (no group, nothing committed) is assigned the positions and
/// then sought to each with its epoch, which makes librdkafka validate it with
/// OffsetForLeaderEpoch. With `auto.offset.reset=earliest` a truncation seeks to the end
/// of the epoch on the current leader (or to the earliest offset when the leader has
/// no such epoch): the first record or end-of-partition seen after the seek is where
/// fetching went on. At or past the position: the log is intact. Before it: the log
/// diverges there. Positions at offset 0 or without an epoch are not checked.
pub async fn divergences(
    conn: &Connection,
    topic: &str,
    isolation: &str,
    positions: &BTreeMap<i32, EpochPosition>,
) -> Result<BTreeMap<i32, i64>, KafkaError> {
    let check: BTreeMap<i32, EpochPosition> =
        positions.iter().filter(|(_, p)| p.offset > 0 && p.epoch >= 0).map(|(k, v)| (*k, *v)).collect();
    if check.is_empty() {
        return Ok(BTreeMap::new());
    }
    let consumer: BaseConsumer<AuthContext> = conn.reader(
        "a position validator",
        &[
            ("group.id", "flexrun-position-validator"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("enable.partition.eof", "true"),
            ("isolation.level", isolation),
            ("fetch.max.bytes", "1048576"),
            ("max.partition.fetch.bytes", "65536"),
        ],
    )?;
    let (topic, bootstrap) = (topic.to_string(), conn.bootstrap.clone());
    tokio::task::spawn_blocking(move || {
        validate_blocking(&consumer, &topic, &check).map_err(|message| KafkaError::Broker { bootstrap, topic, message })
    })
    .await
    .expect("position validation task")
}

fn validate_blocking(
    consumer: &BaseConsumer<AuthContext>,
    topic: &str,
    check: &BTreeMap<i32, EpochPosition>,
) -> Result<BTreeMap<i32, i64>, String> {
    let mut tpl = TopicPartitionList::new();
    for (p, at) in check {
        tpl.add_partition_offset(topic, *p, Offset::Offset(at.offset)).map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| format!("assigning partitions to validate: {e}"))?;
    let c_topic = CString::new(topic).map_err(|e| e.to_string())?;
    for (p, at) in check {
        // SAFETY: the element was added above; the list outlives the call.
        unsafe {
            let e = rdsys::rd_kafka_topic_partition_list_find(tpl.ptr(), c_topic.as_ptr(), *p);
            rdsys::rd_kafka_topic_partition_set_leader_epoch(e, at.epoch);
        }
    }
    consumer.seek_partitions(tpl, CHECK_LIMIT).map_err(|e| format!("seeking to validate positions: {e}"))?;
    let mut open: BTreeMap<i32, EpochPosition> = check.clone();
    let mut out = BTreeMap::new();
    let started = Instant::now();
    let rk = consumer.client().native_ptr();
    while !open.is_empty() {
        if started.elapsed() > CHECK_LIMIT {
            return Err(format!(
                "validating positions {:?} with their leader epochs: no answer for partitions {:?} within {CHECK_LIMIT:?}",
                check,
                open.keys().collect::<Vec<_>>()
            ));
        }
        // SAFETY: the consumer's own poll; the message is destroyed below.
        let m = unsafe { rdsys::rd_kafka_consumer_poll(rk, 200) };
        let Some(m) = std::ptr::NonNull::new(m) else { continue };
        // SAFETY: a live message until destroyed.
        let (err, partition, offset) = unsafe {
            let r = m.as_ref();
            (r.err, r.partition, r.offset)
        };
        // SAFETY: destroyed once, after its last use.
        unsafe { rdsys::rd_kafka_message_destroy(m.as_ptr()) };
        use rdsys::rd_kafka_resp_err_t::*;
        match err {
            RD_KAFKA_RESP_ERR_NO_ERROR | RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                let Some(at) = open.remove(&partition) else { continue };
                if offset < at.offset {
                    out.insert(partition, offset);
                }
            }
            other => tracing::debug!(topic, partition, error = ?other, "position validation: a consumer event"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zero_uuid_is_no_id() {
        assert!(is_zero_id("AAAAAAAAAAAAAAAAAAAAAA"));
        assert!(!is_zero_id("5vNn0vJXT0mV1PBiCsqt7A"));
    }
}
