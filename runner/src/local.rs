//! Helpers for the local stack: create topics and tables, produce sample messages,
//! and count what landed. Used by `flexrun local ...`, the demo script, the
//! integration tests and the benchmark script.

use crate::bigquery::schema::Schema;
use crate::bigquery::{rest, Endpoints, TableRef};
use crate::kafka::Connection;
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use serde_json::json;
use std::time::Duration;

/// The demo table: an id to count duplicates by, plus the benchmark seed's two fields.
pub fn demo_schema() -> Schema {
    Schema::from_json(&json!([
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "logStreamId", "type": "INTEGER", "mode": "NULLABLE"},
        {"name": "message", "type": "STRING", "mode": "NULLABLE"}
    ]))
    .expect("demo schema")
}

/// One bad message of each class the transform knows, cycling by `i`.
pub fn bad_message(i: u64) -> (&'static str, Vec<u8>) {
    match i % 6 {
        0 => ("invalid_json", format!("{{\"id\": {i}, \"message\": ").into_bytes()),
        1 => ("not_an_object", format!("[{i}]").into_bytes()),
        2 => ("not_utf8", vec![b'{', 0xff, 0xfe, b'}']),
        3 => ("unknown_field", format!("{{\"id\": {i}, \"colour\": \"red\"}}").into_bytes()),
        4 => ("wrong_type", format!("{{\"id\": \"id-{i}\"}}").into_bytes()),
        _ => ("missing_required", format!("{{\"logStreamId\": {i}}}").into_bytes()),
    }
}

/// A message in the shape of Google's benchmark (`logStreamId` in [1000001, 2000000),
/// 962 alphanumeric characters), plus `id`. Reproducible from (`seed`, `id`).
pub fn seed_message(id: u64, seed: u64, message_chars: usize) -> Vec<u8> {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let msg: String = (0..message_chars).map(|_| ALNUM[rng.random_range(0..ALNUM.len())] as char).collect();
    json!({"id": id, "logStreamId": rng.random_range(1_000_001..2_000_000), "message": msg}).to_string().into_bytes()
}

/// What [`produce`] sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Produced {
    /// Good messages (ids `start_id..start_id+good`).
    pub good: u64,
    /// Bad messages.
    pub bad: u64,
}

/// Exactly the benchmark's shape, without `id`: `{"logStreamId": .., "message": ..}`.
pub fn seed_shape_message(id: u64, seed: u64, message_chars: usize) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&seed_message(id, seed, message_chars)).expect("own JSON");
    v.as_object_mut().expect("object").remove("id");
    v.to_string().into_bytes()
}

/// The benchmark's shape as Google's generator writes it from its template
/// `{"logStreamId": "{{integer(1000001,2000000)}}", ...}`: the number in quotes.
pub fn seed_quoted_message(id: u64, seed: u64, message_chars: usize) -> Vec<u8> {
    let mut v: serde_json::Value =
        serde_json::from_slice(&seed_shape_message(id, seed, message_chars)).expect("own JSON");
    let n = v["logStreamId"].to_string();
    v["logStreamId"] = serde_json::Value::String(n);
    v.to_string().into_bytes()
}

/// The messages [`produce_shaped`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageShape {
    /// [`seed_message`]: the benchmark's shape plus an `id`.
    Demo,
    /// [`seed_shape_message`]: exactly the benchmark's shape.
    Seed,
    /// [`seed_quoted_message`]: the benchmark's shape with the number quoted.
    SeedQuoted,
}

impl MessageShape {
    /// Message `id` of this shape.
    pub fn message(self, id: u64, seed: u64, chars: usize) -> Vec<u8> {
        match self {
            MessageShape::Demo => seed_message(id, seed, chars),
            MessageShape::Seed => seed_shape_message(id, seed, chars),
            MessageShape::SeedQuoted => seed_quoted_message(id, seed, chars),
        }
    }
}

/// Produce `count` messages with ids from `start_id`, spread round-robin over
/// `partitions`; with `bad_every = Some(k)` every k-th message is a bad one instead.
pub async fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    start_id: u64,
    count: u64,
    bad_every: Option<u64>,
    message_chars: usize,
) -> Result<Produced> {
    produce_shaped(bootstrap, topic, partitions, start_id, count, bad_every, message_chars, MessageShape::Demo).await
}

/// One good message with id `id` whose `message` field has `chars` characters, to
/// partition 0 (for the tests of records larger than an AppendRows request).
pub async fn produce_large(bootstrap: &str, topic: &str, id: u64, chars: usize) -> Result<()> {
    let producer: FutureProducer = Connection::plaintext(bootstrap)
        .client("a producer", &[("message.max.bytes", "33554432"), ("message.timeout.ms", "60000")])?;
    let payload = seed_message(id, 42, chars);
    producer
        .send(FutureRecord::<(), [u8]>::to(topic).partition(0).payload(payload.as_slice()), Duration::from_secs(60))
        .await
        .map_err(|(e, _)| anyhow::anyhow!("producing a {}-byte message to {topic}: {e}", payload.len()))?;
    Ok(())
}

/// [`produce`], in a chosen [`MessageShape`].
#[allow(clippy::too_many_arguments)]
pub async fn produce_shaped(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    start_id: u64,
    count: u64,
    bad_every: Option<u64>,
    message_chars: usize,
    shape: MessageShape,
) -> Result<Produced> {
    let producer: FutureProducer = Connection::plaintext(bootstrap).client(
        "a producer",
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("batch.num.messages", "2000"),
            ("queue.buffering.max.messages", "200000"),
            ("message.timeout.ms", "60000"),
            // Large records for the reliability tests (librdkafka's default cap is 1 MB).
            ("message.max.bytes", "33554432"),
        ],
    )?;
    let mut out = Produced::default();
    let mut inflight = Vec::with_capacity(4096);
    for i in 0..count {
        let id = start_id + i;
        let payload = match bad_every {
            Some(k) if k > 0 && (i + 1) % k == 0 => {
                out.bad += 1;
                bad_message(out.bad - 1).1
            }
            _ => {
                out.good += 1;
                shape.message(id, 42, message_chars)
            }
        };
        let part = (i % partitions.max(1) as u64) as i32;
        let p = producer.clone();
        let t = topic.to_string();
        inflight.push(tokio::spawn(async move {
            let rec: FutureRecord<'_, (), [u8]> = FutureRecord::to(&t).payload(payload.as_slice()).partition(part);
            p.send(rec, Duration::from_secs(60)).await.map(|_| ()).map_err(|(e, _)| e)
        }));
        if inflight.len() >= 4096 {
            for h in inflight.drain(..) {
                h.await?.with_context(|| format!("producing to {topic}"))?;
            }
        }
    }
    for h in inflight {
        h.await?.with_context(|| format!("producing to {topic}"))?;
    }
    producer.flush(Duration::from_secs(30)).context("flushing the producer")?;
    Ok(out)
}

/// Row count and distinct `id` count of a table (see [`rest::count_rows`]).
pub async fn count_rows(ep: &Endpoints, table: &TableRef, distinct_col: Option<&str>) -> Result<(i64, Option<i64>)> {
    Ok(rest::count_rows(ep, table, distinct_col).await?)
}
