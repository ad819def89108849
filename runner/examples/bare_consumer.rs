//! The floor for kafka-to-bq's CPU cost: bare librdkafka consumers that read a whole
//! topic from the beginning and only count messages and bytes. They are built through
//! the same [`flexrun::kafka::Connection`] and fetch settings as a shard's consumer, so
//! `scripts/bench-hot-path.sh` compares like with like.
//!
//! ```text
//! cargo run --release --example bare_consumer -- BOOTSTRAP TOPIC MESSAGES [CONSUMERS]
//! ```
//! With CONSUMERS = k > 1, partition p is read by consumer p % k on its own thread, as
//! kafka-to-bq's k shards read them. With CONSUMERS = `splitK`, one consumer reads every
//! partition and librdkafka's split partition queues hand partition p to tokio task
//! p % K through rdkafka's streams; `async1` is one consumer read through its tokio
//! stream; `batch1` is one consumer read up to 256 messages per call with
//! `rd_kafka_consume_batch_queue`, as kafka-to-bq's shards take them (issue 29's
//! step 2), and `batch1h` the same asking for each message's headers, as a shard does.
//! `shardsK` is kafka-to-bq's own reader with no processing: one worker consumer whose
//! partitions K tokio tasks take as a worker's K shards do (`kafka::shared`);
//! `shardsKv` also validates each payload as UTF-8 (simdutf8), the mapping's first read
//! of its bytes, so the cost of that first touch is measured where the job pays it. Prints one JSON line: messages, bytes, active seconds and process CPU
//! seconds.

use flexrun::kafka::source::SHARD_CONSUMER;
use flexrun::kafka::Connection;
use futures::StreamExt;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Messages and bytes read by all consumers, and when the first message arrived.
#[derive(Default)]
struct Counts {
    messages: AtomicU64,
    bytes: AtomicU64,
    first: OnceLock<Instant>,
}

fn read(conn: &Connection, topic: &str, parts: &[i32], want: u64, counts: &Counts) -> Result<(), String> {
    // Exactly a shard's consumer settings (kafka::source::SHARD_CONSUMER).
    let consumer: BaseConsumer = assigned(conn, topic, parts)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while counts.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.map_err(|e| e.to_string())?;
            count(counts, m.payload());
        }
    }
    Ok(())
}

/// The consumer settings of a shard, with every partition of `parts` assigned at the beginning.
fn assigned<C: rdkafka::consumer::Consumer + rdkafka::config::FromClientConfig>(
    conn: &Connection,
    topic: &str,
    parts: &[i32],
) -> Result<C, String> {
    let mut settings = vec![("group.id", "flexrun-bare-consumer")];
    settings.extend_from_slice(SHARD_CONSUMER);
    let consumer: C = conn.client("a consumer", &settings).map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    Ok(consumer)
}

/// One consumer per process, its partitions split into `k` tokio tasks' queues (or read
/// through its own stream when `k` is 0), on a runtime like flexrun's.
fn read_async(
    conn: &Connection,
    topic: &str,
    parts: &[i32],
    want: u64,
    k: usize,
    counts: &Arc<Counts>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let consumer: Arc<StreamConsumer> = Arc::new(assigned(conn, topic, parts)?);
        let mut tasks = Vec::new();
        if k == 0 {
            let (c, counts) = (consumer.clone(), counts.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = c.stream();
                while let Some(Ok(m)) = s.next().await {
                    count(&counts, m.payload());
                }
            }));
        } else {
            for p in parts {
                let q = consumer.split_partition_queue(topic, *p).ok_or("no such partition")?;
                let counts = counts.clone();
                tasks.push(tokio::spawn(async move {
                    let mut s = q.stream();
                    while let Some(Ok(m)) = s.next().await {
                        count(&counts, m.payload());
                    }
                }));
            }
            // The main queue serves the consumer's events.
            let c = consumer.clone();
            tokio::spawn(async move { while c.recv().await.is_ok() {} });
        }
        // The tasks end with the runtime once every message is counted.
        let deadline = Instant::now() + Duration::from_secs(300);
        while counts.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(tasks);
        Ok(())
    })
}

fn count(counts: &Counts, payload: Option<&[u8]>) {
    counts.first.get_or_init(Instant::now);
    counts.messages.fetch_add(1, Ordering::Relaxed);
    counts.bytes.fetch_add(payload.map_or(0, <[u8]>::len) as u64, Ordering::Relaxed);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (bootstrap, topic, want, k) = match args.as_slice() {
        [_, b, t, n] => (b.clone(), t.clone(), n.parse::<u64>()?, "1".to_string()),
        [_, b, t, n, k] => (b.clone(), t.clone(), n.parse::<u64>()?, k.clone()),
        _ => {
            eprintln!("usage: bare_consumer BOOTSTRAP TOPIC MESSAGES [CONSUMERS]");
            std::process::exit(2);
        }
    };
    let conn = Connection::plaintext(&bootstrap);
    let metadata: BaseConsumer = conn.client("a metadata client", &[])?;
    let md = metadata.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
    let parts: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let counts = Arc::new(Counts::default());
    if let Some(split) = k.strip_prefix("split").or(k.strip_prefix("async").map(|_| "0")) {
        read_async(&conn, &topic, &parts, want, split.parse()?, &counts)?;
        return report(&counts);
    }
    if k == "batch1" || k == "batch1h" {
        read_batched(&conn, &topic, &parts, want, k == "batch1h", &counts)?;
        return report(&counts);
    }
    if let Some(shards) = k.strip_prefix("shards") {
        let (shards, touch) = shards.strip_suffix('v').map_or((shards, false), |s| (s, true));
        read_shards(&conn, &topic, &parts, want, shards.parse()?, touch, &counts)?;
        return report(&counts);
    }
    let k = k.parse::<usize>()?.max(1);
    let threads: Vec<_> = (0..k)
        .map(|i| {
            let mine: Vec<i32> = parts.iter().copied().filter(|p| *p as usize % k == i).collect();
            let (conn, topic, counts) = (conn.clone(), topic.clone(), counts.clone());
            std::thread::spawn(move || read(&conn, &topic, &mine, want, &counts))
        })
        .collect();
    for t in threads {
        t.join().expect("consumer thread")?;
    }
    report(&counts)
}

/// One consumer that takes up to 256 ready messages per call
/// (`rd_kafka_consume_batch_queue`) instead of one per poll. With `headers`, each
/// message's headers are asked for too, as a job that may need them for a dead-letter
/// row must: librdkafka parses the record's header section on that first access.
fn read_batched(
    conn: &Connection,
    topic: &str,
    parts: &[i32],
    want: u64,
    headers: bool,
    counts: &Counts,
) -> Result<(), String> {
    use rdkafka::bindings as rdsys;
    let consumer: BaseConsumer = assigned(conn, topic, parts)?;
    // SAFETY: the queue and the messages are librdkafka's, used while `consumer` lives
    // and destroyed once each.
    unsafe {
        let q = rdsys::rd_kafka_queue_get_consumer(consumer.client().native_ptr());
        let mut buf = [std::ptr::null_mut::<rdsys::rd_kafka_message_t>(); 256];
        let deadline = Instant::now() + Duration::from_secs(300);
        while counts.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            let n = rdsys::rd_kafka_consume_batch_queue(q, 100, buf.as_mut_ptr(), buf.len());
            for m in &buf[..n.max(0) as usize] {
                let len = (**m).len;
                if (**m).err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    counts.first.get_or_init(Instant::now);
                    counts.messages.fetch_add(1, Ordering::Relaxed);
                    counts.bytes.fetch_add(len as u64, Ordering::Relaxed);
                    if headers {
                        let mut h = std::ptr::null_mut();
                        std::hint::black_box(rdsys::rd_kafka_message_headers(*m, &mut h));
                    }
                }
                rdsys::rd_kafka_message_destroy(*m);
            }
        }
        rdsys::rd_kafka_queue_destroy(q);
    }
    Ok(())
}

/// kafka-to-bq's own reader with no processing: one
/// [`flexrun::kafka::shared::SharedConsumer`], its partitions taken by `k` tokio tasks
/// as a worker's shards take them ([`flexrun::kafka::shared::Partitions`]), each task
/// taking what is ready (up to 1,024) and waiting on librdkafka's queue callback when
/// nothing is, as `Shard::collect` does. The messages are counted and dropped.
fn read_shards(
    conn: &Connection,
    topic: &str,
    parts: &[i32],
    want: u64,
    k: usize,
    touch: bool,
    counts: &Arc<Counts>,
) -> Result<(), String> {
    use flexrun::kafka::shared::SharedConsumer;
    use flexrun::kafka::SourceSettings;
    let source = SourceSettings {
        conn: conn.clone(),
        topic: topic.to_string(),
        group_id: "flexrun-bare-consumer".into(),
        start_earliest: true,
        gap_policy: Default::default(),
        isolation: Default::default(),
        group_offsets: true,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let shared = SharedConsumer::new(&source, 0, &[]).map_err(|e| e.to_string())?;
        let mut tasks = Vec::new();
        for i in 0..k.max(1) {
            let mine: std::collections::BTreeMap<i32, i64> =
                parts.iter().filter(|p| **p as usize % k.max(1) == i).map(|p| (*p, 0)).collect();
            let reader = shared.take(&mine).map_err(|e| e.to_string())?;
            let counts = counts.clone();
            tasks.push(tokio::spawn(async move {
                while counts.messages.load(Ordering::Relaxed) < want {
                    let mut bytes = 0;
                    let n = reader.take_ready(1024, |m| {
                        let payload = m.view().payload().unwrap_or_default();
                        if touch {
                            std::hint::black_box(simdutf8::basic::from_utf8(payload).is_ok());
                        }
                        bytes += payload.len() as u64
                    });
                    if n > 0 {
                        counts.first.get_or_init(Instant::now);
                        counts.bytes.fetch_add(bytes, Ordering::Relaxed);
                        counts.messages.fetch_add(n as u64, Ordering::Relaxed);
                    } else {
                        reader.wait(Duration::from_millis(200)).await;
                    }
                }
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        while counts.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for t in tasks {
            t.abort();
        }
        Ok(())
    })
}

/// Print the JSON line.
fn report(counts: &Counts) -> Result<(), Box<dyn std::error::Error>> {
    let active = counts.first.get().map_or(0.0, |f| f.elapsed().as_secs_f64());
    let (user, sys) = flexrun::stats::process_cpu_seconds();
    let (messages, bytes) = (counts.messages.load(Ordering::Relaxed), counts.bytes.load(Ordering::Relaxed));
    println!(
        "{{\"messages\": {messages}, \"bytes\": {bytes}, \"active_s\": {active:.3}, \"cpu_user_s\": {user:.3}, \"cpu_sys_s\": {sys:.3}}}"
    );
    Ok(())
}
