//! The floor for kafka-to-bq's CPU cost: a bare librdkafka consumer that reads a whole
//! topic from the beginning and only counts messages and bytes. It is built through
//! the same [`flexrun::kafka::Connection`] and fetch settings as a shard's consumer, so
//! `scripts/bench-hot-path.sh` compares like with like.
//!
//! ```text
//! cargo run --release --example bare_consumer -- BOOTSTRAP TOPIC MESSAGES
//! ```
//! Prints one JSON line: messages, bytes, active seconds and process CPU seconds.

use flexrun::kafka::Connection;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, bootstrap, topic, n] = args.as_slice() else {
        eprintln!("usage: bare_consumer BOOTSTRAP TOPIC MESSAGES");
        std::process::exit(2);
    };
    let want: u64 = n.parse()?;
    let conn = Connection::plaintext(bootstrap);
    let metadata: BaseConsumer = conn.client("a metadata client", &[])?;
    let md = metadata.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let parts: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let consumer: BaseConsumer = conn.client(
        "a consumer",
        &[
            ("group.id", "flexrun-bare-consumer"),
            ("enable.auto.commit", "false"),
            ("fetch.wait.max.ms", "10"),
            ("queued.min.messages", "20000"),
            ("max.partition.fetch.bytes", "33554432"),
            ("fetch.max.bytes", "67108864"),
            ("receive.message.max.bytes", "67109376"),
        ],
    )?;
    let mut tpl = TopicPartitionList::new();
    for p in &parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let (mut messages, mut bytes) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    while messages < want && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m?;
            first.get_or_insert_with(Instant::now);
            messages += 1;
            bytes += m.payload().map_or(0, <[u8]>::len) as u64;
        }
    }
    let active = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let (user, sys) = flexrun::stats::process_cpu_seconds();
    println!(
        "{{\"messages\": {messages}, \"bytes\": {bytes}, \"active_s\": {active:.3}, \"cpu_user_s\": {user:.3}, \"cpu_sys_s\": {sys:.3}}}"
    );
    Ok(())
}
