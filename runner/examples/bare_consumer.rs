//! The floor for kafka-to-bq's CPU cost: bare librdkafka consumers that read a whole
//! topic from the beginning and only count messages and bytes. They are built through
//! the same [`flexrun::kafka::Connection`] and fetch settings as a shard's consumer, so
//! `scripts/bench-hot-path.sh` compares like with like.
//!
//! ```text
//! cargo run --release --example bare_consumer -- BOOTSTRAP TOPIC MESSAGES [CONSUMERS]
//! ```
//! With CONSUMERS = k > 1, partition p is read by consumer p % k on its own thread, as
//! kafka-to-bq's k shards read them. Prints one JSON line: messages, bytes, active
//! seconds and process CPU seconds.

use flexrun::kafka::source::SHARD_CONSUMER;
use flexrun::kafka::Connection;
use rdkafka::consumer::{BaseConsumer, Consumer};
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
    let mut settings = vec![("group.id", "flexrun-bare-consumer")];
    settings.extend_from_slice(SHARD_CONSUMER);
    let consumer: BaseConsumer = conn.client("a consumer", &settings).map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while counts.messages.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.map_err(|e| e.to_string())?;
            counts.first.get_or_init(Instant::now);
            counts.messages.fetch_add(1, Ordering::Relaxed);
            counts.bytes.fetch_add(m.payload().map_or(0, <[u8]>::len) as u64, Ordering::Relaxed);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (bootstrap, topic, want, k) = match args.as_slice() {
        [_, b, t, n] => (b.clone(), t.clone(), n.parse::<u64>()?, 1usize),
        [_, b, t, n, k] => (b.clone(), t.clone(), n.parse::<u64>()?, k.parse::<usize>()?.max(1)),
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
    let active = counts.first.get().map_or(0.0, |f| f.elapsed().as_secs_f64());
    let (user, sys) = flexrun::stats::process_cpu_seconds();
    let (messages, bytes) = (counts.messages.load(Ordering::Relaxed), counts.bytes.load(Ordering::Relaxed));
    println!(
        "{{\"messages\": {messages}, \"bytes\": {bytes}, \"active_s\": {active:.3}, \"cpu_user_s\": {user:.3}, \"cpu_sys_s\": {sys:.3}}}"
    );
    Ok(())
}
