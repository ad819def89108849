//! A dead-letter row read back into the Kafka record it came from, and the key that
//! names that record in the replay ledger.
//!
//! What a row holds depends on the path that wrote it ([`crate::kafka_to_bq::map::dlq::encode`]):
//! - the JSON path ([`Payload::Text`]): `payloadBytes` is the value; the key, topic,
//!   partition, offset, timestamp and headers are in `payloadString`, Jackson's
//!   rendering of Beam's `KafkaRecord`;
//! - the Avro paths ([`Payload::Bytes`]): `payloadBytes` is Beam's `KafkaRecordCoder`
//!   encoding of the whole record, decoded here by [`decode_coder`].
//!
//! A row whose payload was cut when it was dead-lettered cannot be replayed: what is
//! left is not the record.

use crate::kafka_to_bq::map::dlq::Payload;
use crate::kafka_to_bq::map::metadata::KafkaMeta;
use base64::Engine;

/// One dead-letter row as read from the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterRow {
    /// `payloadString`.
    pub payload_string: String,
    /// `payloadBytes`.
    pub payload_bytes: Vec<u8>,
    /// `errorMessage`.
    pub error: Option<String>,
    /// `attributes`: where the record came from (job, topic, topic id, coordinates;
    /// empty in rows Google's template or an older flexrun wrote).
    pub attributes: std::collections::BTreeMap<String, String>,
}

/// Whose a dead-letter row is, for a replay of one job's topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The job's, from the topic being replayed.
    Mine,
    /// The job's, from another of its topics.
    OtherTopic(String),
    /// Another job's.
    OtherJob(String),
    /// The row names no job (written by Google's template or an older flexrun).
    Unnamed,
}

/// The `attributes` column as BigQuery's REST API returns a REPEATED RECORD of `key`
/// and `value`: `[{"v": {"f": [{"v": key}, {"v": value}]}}, ...]` (tabledata's row
/// format). Anything else reads as no attributes.
///
/// ```
/// use flexrun::kafka_to_bq::replay::record::parse_attributes;
/// let a = parse_attributes(r#"[{"v":{"f":[{"v":"job"},{"v":"orders"}]}}]"#);
/// assert_eq!(a.get("job").map(String::as_str), Some("orders"));
/// assert!(parse_attributes("[]").is_empty());
/// ```
pub fn parse_attributes(text: &str) -> std::collections::BTreeMap<String, String> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Default::default();
    };
    items
        .iter()
        .filter_map(|item| {
            let f = item.get("v")?.get("f")?.as_array()?;
            let text = |i: usize| f.get(i)?.get("v")?.as_str().map(str::to_string);
            Some((text(0)?, text(1)?))
        })
        .collect()
}

/// The Kafka record a dead-letter row came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Topic ("" when the row does not say: a record Google rendered as `KafkaRecord@hash`).
    pub topic: String,
    /// Partition (-1 when unknown).
    pub partition: i32,
    /// Offset (-1 when unknown).
    pub offset: i64,
    /// Kafka timestamp in ms, -1 for none.
    pub timestamp_ms: i64,
    /// Headers in order (a null value is None).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
}

/// Why a dead-letter row cannot go back through the mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreplayable {
    /// The payload was cut to fit a dead-letter row.
    #[error("its payload was truncated when it was dead-lettered, so the record is not all there; replay it from Kafka (partition and offset are in payloadString)")]
    Truncated,
    /// `payloadBytes` is not a `KafkaRecordCoder` encoding.
    #[error("payloadBytes is not Beam's KafkaRecordCoder encoding of a record: {0}")]
    BadCoderBytes(String),
}

impl DeadLetterRow {
    /// The record this row came from, as the path that wrote it (`payload`) encoded it.
    pub fn recover(&self, payload: Payload) -> Result<Recovered, Unreplayable> {
        if self.error.as_deref().is_some_and(|e| e.contains("dead-letter payload truncated")) {
            return Err(Unreplayable::Truncated);
        }
        match payload {
            Payload::Bytes => decode_coder(&self.payload_bytes).map_err(Unreplayable::BadCoderBytes),
            Payload::Text => Ok(from_payload_string(&self.payload_string, self.payload_bytes.clone())),
        }
    }

    /// Whose this row is, for a replay of `job`'s topic `topic`.
    pub fn owner(&self, job: &str, topic: &str) -> Owner {
        use crate::kafka_to_bq::map::dlq::attr;
        match (self.attributes.get(attr::JOB), self.attributes.get(attr::TOPIC)) {
            (None, _) => Owner::Unnamed,
            (Some(j), _) if j != job => Owner::OtherJob(j.clone()),
            (Some(_), Some(t)) if t != topic => Owner::OtherTopic(t.clone()),
            (Some(_), _) => Owner::Mine,
        }
    }

    /// The ledger key of this row: the Kafka record's coordinates when the row names
    /// them (a record dead-lettered twice, as at-least-once delivery can, is one
    /// record and is replayed once), else an MD5 of the row's payload. A row that names
    /// its job and log is keyed by them too: two jobs that read one topic share no key,
    /// and neither do two topics of one name (a topic recreated has other records at
    /// the same offsets).
    pub fn key(&self, rec: &Recovered) -> String {
        use crate::kafka_to_bq::map::dlq::attr;
        if let (Some(job), false, true) = (self.attributes.get(attr::JOB), rec.topic.is_empty(), rec.offset >= 0) {
            let id = self.attributes.get(attr::TOPIC_ID).map(|i| format!("@{i}")).unwrap_or_default();
            return format!("job:{job}:kafka:{}{id}:{}:{}", rec.topic, rec.partition, rec.offset);
        }
        if !rec.topic.is_empty() && rec.offset >= 0 {
            return format!("kafka:{}:{}:{}", rec.topic, rec.partition, rec.offset);
        }
        let mut ctx = md5::Md5::default();
        md5::Digest::update(&mut ctx, self.payload_string.as_bytes());
        md5::Digest::update(&mut ctx, [0u8]);
        md5::Digest::update(&mut ctx, &self.payload_bytes);
        let d = md5::Digest::finalize(ctx);
        format!("md5:{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
}

impl Recovered {
    /// The record's metadata, for the job's metadata columns.
    pub fn meta(&self) -> KafkaMeta<'_> {
        KafkaMeta {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: (self.timestamp_ms >= 0).then_some(self.timestamp_ms),
            headers: self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect(),
            // A dead-letter row does not tell a null value from an empty one: a dead-lettered
            // tombstone is read back as an empty value, which fails again with its reason.
            null_value: false,
        }
    }
}

/// The JSON path's record: `value` from `payloadBytes`, the rest from `payloadString`
/// when it parses (Google's template renders a record with headers as
/// `KafkaRecord@hash`, which names nothing; the value is then all there is).
fn from_payload_string(text: &str, value: Vec<u8>) -> Recovered {
    let unknown = Recovered { partition: -1, offset: -1, timestamp_ms: -1, value: value.clone(), ..Default::default() };
    let Ok(j) = serde_json::from_str::<serde_json::Value>(text) else { return unknown };
    let b64 = |v: &serde_json::Value| v.as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
    let headers = j["headers"]
        .as_array()
        .map(|hs| hs.iter().map(|h| (h["key"].as_str().unwrap_or_default().to_string(), b64(&h["value"]))).collect())
        .unwrap_or_default();
    Recovered {
        topic: j["topic"].as_str().unwrap_or_default().to_string(),
        partition: j["partition"].as_i64().map_or(-1, |p| p as i32),
        offset: j["offset"].as_i64().unwrap_or(-1),
        timestamp_ms: j["timestamp"].as_i64().unwrap_or(-1),
        headers,
        key: j["kv"]["key"].as_str().map(|k| k.as_bytes().to_vec()),
        value,
    }
}

/// Decode Beam's `KafkaRecordCoder` bytes, the inverse of
/// [`crate::kafka_to_bq::map::dlq::kafka_record_coder_bytes`] (a null header value reads
/// back as empty, as the coder writes it).
///
/// ```
/// use flexrun::kafka_to_bq::map::dlq::{kafka_record_coder_bytes, Payload, RecordRef, TimestampType};
/// use flexrun::kafka_to_bq::replay::record::decode_coder;
/// let headers = [("h", Some(&b"v"[..]))];
/// let rec = RecordRef { topic: "t", partition: 3, offset: 42, timestamp_ms: 1_700_000_000_000,
///     timestamp_type: TimestampType::CreateTime, key: Some(b"k"), value: b"\x02ab",
///     headers: &headers, processed_ms: None, payload: Payload::Bytes, origin: Default::default() };
/// let back = decode_coder(&kafka_record_coder_bytes(&rec)).unwrap();
/// assert_eq!((back.topic.as_str(), back.partition, back.offset), ("t", 3, 42));
/// assert_eq!((back.key.as_deref(), back.value.as_slice()), (Some(&b"k"[..]), &b"\x02ab"[..]));
/// ```
pub fn decode_coder(bytes: &[u8]) -> Result<Recovered, String> {
    let mut b = bytes;
    let topic = String::from_utf8(nested(&mut b, "topic")?.to_vec()).map_err(|_| "the topic is not UTF-8")?;
    let partition = varint(&mut b, "partition")? as u32 as i32;
    let offset = varint(&mut b, "offset")? as i64;
    let timestamp_ms = varint(&mut b, "timestamp")? as i64;
    let _timestamp_type = varint(&mut b, "timestamp type")?;
    if b.len() < 4 {
        return Err("it ends before the header count".into());
    }
    let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    b = &b[4..];
    let mut headers = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let k = String::from_utf8(nested(&mut b, "header name")?.to_vec()).map_err(|_| "a header name is not UTF-8")?;
        headers.push((k, Some(nested(&mut b, "header value")?.to_vec())));
    }
    let key = nullable(&mut b, "key")?.map(<[u8]>::to_vec);
    let value = nullable(&mut b, "value")?.ok_or("the value is null")?.to_vec();
    if !b.is_empty() {
        return Err(format!("{} bytes follow the value", b.len()));
    }
    Ok(Recovered { topic, partition, offset, timestamp_ms, headers, key, value })
}

fn varint(b: &mut &[u8], what: &str) -> Result<u64, String> {
    prost::encoding::decode_varint(b).map_err(|_| format!("the {what} is not a varint"))
}

fn nested<'a>(b: &mut &'a [u8], what: &str) -> Result<&'a [u8], String> {
    let n = varint(b, what)? as usize;
    if b.len() < n {
        return Err(format!("the {what} needs {n} bytes and {} are left", b.len()));
    }
    let (v, rest) = b.split_at(n);
    *b = rest;
    Ok(v)
}

fn nullable<'a>(b: &mut &'a [u8], what: &str) -> Result<Option<&'a [u8]>, String> {
    let (&flag, rest) = b.split_first().ok_or_else(|| format!("it ends before the {what}"))?;
    *b = rest;
    match flag {
        0 => Ok(None),
        1 => nested(b, what).map(Some),
        f => Err(format!("the {what}'s null flag is {f}, not 0 or 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka_to_bq::map::dlq::{kafka_record_coder_bytes, payload_string, RecordRef, TimestampType};

    fn rec<'a>(headers: &'a [(&'a str, Option<&'a [u8]>)], payload: Payload) -> RecordRef<'a> {
        RecordRef {
            topic: "orders",
            partition: 2,
            offset: 17,
            timestamp_ms: 1_733_000_000_123,
            timestamp_type: TimestampType::CreateTime,
            key: Some(b"k-1"),
            value: br#"{"id": 1}"#,
            headers,
            processed_ms: Some(5),
            payload,
            origin: Default::default(),
        }
    }

    #[test]
    fn the_json_paths_row_gives_back_its_record_and_names_it_by_kafka_coordinates() {
        let headers = [("trace", Some(&b"\x00\x01"[..])), ("empty", None)];
        let r = rec(&headers, Payload::Text);
        let row =
            DeadLetterRow { payload_string: payload_string(&r), payload_bytes: r.value.to_vec(), ..Default::default() };
        let back = row.recover(Payload::Text).unwrap();
        assert_eq!(
            (back.topic.as_str(), back.partition, back.offset, back.timestamp_ms),
            ("orders", 2, 17, 1_733_000_000_123)
        );
        assert_eq!(back.key.as_deref(), Some(&b"k-1"[..]));
        assert_eq!(back.value, r.value);
        assert_eq!(back.headers, vec![("trace".into(), Some(vec![0, 1])), ("empty".into(), None)]);
        assert_eq!(row.key(&back), "kafka:orders:2:17");
    }

    /// Issue 62, item 2: a row names its job and log; one job's replay takes only its
    /// own, and two jobs (or two logs of one topic name) never share a ledger key.
    #[test]
    fn a_row_that_names_its_job_belongs_to_that_job_and_topic_only() {
        let r = rec(&[], Payload::Text);
        let named = |job: &str, topic: &str, id: &str| DeadLetterRow {
            payload_string: payload_string(&r),
            payload_bytes: r.value.to_vec(),
            attributes: [("job", job), ("topic", topic), ("topic_id", id)]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ..Default::default()
        };
        let a = named("A", "orders", "id1");
        assert_eq!(a.owner("A", "orders"), Owner::Mine);
        assert_eq!(a.owner("B", "orders"), Owner::OtherJob("A".into()));
        assert_eq!(a.owner("A", "payments"), Owner::OtherTopic("orders".into()));
        let plain = DeadLetterRow { attributes: Default::default(), ..a.clone() };
        assert_eq!(plain.owner("A", "orders"), Owner::Unnamed);
        let back = a.recover(Payload::Text).unwrap();
        assert_eq!(a.key(&back), "job:A:kafka:orders@id1:2:17");
        assert_ne!(a.key(&back), named("B", "orders", "id1").key(&back));
        assert_ne!(
            a.key(&back),
            named("A", "orders", "id2").key(&back),
            "a recreated topic's record is another record"
        );
    }

    #[test]
    fn a_row_google_rendered_without_coordinates_is_named_by_its_content() {
        let row = DeadLetterRow {
            payload_string: "KafkaRecord@1a2b".into(),
            payload_bytes: b"{}".to_vec(),
            ..Default::default()
        };
        let back = row.recover(Payload::Text).unwrap();
        assert_eq!(back.value, b"{}");
        let k = row.key(&back);
        assert!(k.starts_with("md5:") && k.len() == 36, "{k}");
        let other = DeadLetterRow { payload_bytes: b"{ }".to_vec(), ..row.clone() };
        assert_ne!(other.key(&other.recover(Payload::Text).unwrap()), k);
    }

    #[test]
    fn a_truncated_payload_and_bad_coder_bytes_are_refused_with_the_reason() {
        let row = DeadLetterRow {
            payload_string: "{}".into(),
            payload_bytes: vec![],
            error: Some("x (dead-letter payload truncated: ...)".into()),
            ..Default::default()
        };
        assert_eq!(row.recover(Payload::Text), Err(Unreplayable::Truncated));
        let row = DeadLetterRow { error: None, payload_bytes: vec![0x05, b'a'], ..row };
        let e = row.recover(Payload::Bytes).unwrap_err().to_string();
        assert!(e.contains("topic needs 5 bytes"), "{e}");
    }

    proptest::proptest! {
        /// Whatever the record, the coder bytes decode back to it (a null header value
        /// comes back empty, as Beam's coder writes it).
        #[test]
        fn coder_bytes_round_trip(
            topic in "[a-z._-]{1,20}", partition in 0i32..10_000, offset in 0i64..i64::MAX,
            ts in -1i64..4_000_000_000_000, key in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..40)),
            value in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            hs in proptest::collection::vec(("[a-z]{1,8}", proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..10))), 0..4),
        ) {
            let headers: Vec<(&str, Option<&[u8]>)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
            let r = RecordRef { topic: &topic, partition, offset, timestamp_ms: ts, timestamp_type: TimestampType::LogAppendTime,
                key: key.as_deref(), value: &value, headers: &headers, processed_ms: None, payload: Payload::Bytes, origin: Default::default() };
            let back = decode_coder(&kafka_record_coder_bytes(&r)).unwrap();
            proptest::prop_assert_eq!(&back.topic, &topic);
            proptest::prop_assert_eq!((back.partition, back.offset, back.timestamp_ms), (partition, offset, ts));
            proptest::prop_assert_eq!(back.key, key);
            proptest::prop_assert_eq!(back.value, value);
            let want: Vec<(String, Option<Vec<u8>>)> = hs.iter().map(|(k, v)| (k.clone(), Some(v.clone().unwrap_or_default()))).collect();
            proptest::prop_assert_eq!(back.headers, want);
        }
    }
}
