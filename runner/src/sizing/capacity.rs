//! `flexrun capacity`'s probe: one trial of a producer at a fixed rate and a consumer
//! reading the same topic, against a real broker, judged by congestion indicators.
//!
//! Indicators (the first that trips names the trial's failure):
//! - **achieved rate below offered**: fewer than `achieved_ratio` × offered messages
//!   were acknowledged per second over the trial's second half (the first half includes
//!   connection set-up), or the sender fell more than half a second behind its schedule;
//! - **p99 produce latency**: send → broker acknowledgement, above `p99_limit`;
//! - **consumer lag growing**: the consumer fell further behind over the second half of
//!   the trial by more than `lag_growth_limit_s` seconds' worth of input;
//! - **p99 end-to-end latency**: send → consumed (a timestamp in the payload), above
//!   `p99_limit`.
//!
//! Each trial uses a fresh producer and consumer and starts at the topic's end, so
//! trials do not carry each other's backlog.

use crate::kafka::acks::now_us;
use crate::kafka::oauth::AuthContext;
use crate::kafka::{AckContext, Acks, Connection};
use anyhow::{anyhow, Result};
use flexrun_estimator::Trial;
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How trials are run and judged.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// Bootstrap servers.
    pub bootstrap: String,
    /// Topic (must exist).
    pub topic: String,
    /// Length of each trial.
    pub trial: Duration,
    /// p99 latency above which a trial fails.
    pub p99_limit: Duration,
    /// Lag growth over the second half, in seconds of input, above which a trial fails.
    pub lag_growth_limit_s: f64,
    /// Achieved ÷ offered below which a trial fails.
    pub achieved_ratio: f64,
    /// At most this many messages/s consumed (a downstream of known capacity), if set.
    pub consumer_limit: Option<f64>,
}

/// What one trial measured, besides its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct TrialDetail {
    /// Message size, bytes.
    pub message_bytes: usize,
    /// Offered messages per second.
    pub offered: f64,
    /// Acknowledged messages per second.
    pub achieved: f64,
    /// Consumed messages per second.
    pub consumed: f64,
    /// p99 produce latency, ms.
    pub produce_p99_ms: f64,
    /// p99 end-to-end latency, ms.
    pub end_to_end_p99_ms: f64,
    /// Lag growth over the second half, messages.
    pub lag_growth: f64,
    /// The indicator that tripped.
    pub tripped: Option<String>,
}

fn histogram() -> Histogram<u64> {
    crate::stats::histogram()
}

/// The topic's partitions (None when the topic does not exist), or a clear error when
/// the broker cannot be reached.
pub fn topic_partitions(bootstrap: &str, topic: &str) -> Result<Option<Vec<i32>>> {
    let c: BaseConsumer = Connection::plaintext(bootstrap).client("a Kafka client", &[])?;
    let md = c.fetch_metadata(None, Duration::from_secs(5)).map_err(|e| anyhow!("cannot reach the Kafka broker at {bootstrap}: {e} (is it running? `scripts/stack.sh start` starts the local one)"))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
    let mut ps: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if t.error().is_some() || ps.is_empty() {
        return Ok(None);
    }
    ps.sort_unstable();
    Ok(Some(ps))
}

/// The topic's partitions; an error when the broker is unreachable or the topic missing.
pub fn partitions(bootstrap: &str, topic: &str) -> Result<Vec<i32>> {
    topic_partitions(bootstrap, topic)?.ok_or_else(|| anyhow!("topic {topic} does not exist on {bootstrap}"))
}

/// Run one trial at `rate` messages/s of `size` bytes: open a producer and a consumer at
/// the topic's end, send at the rate for the trial's length, let what was sent arrive,
/// and judge the measurements.
pub fn trial(cfg: &ProbeConfig, size: usize, rate: f64) -> Result<(Trial, TrialDetail)> {
    let parts = partitions(&cfg.bootstrap, &cfg.topic)?;
    let acks = Acks::new();
    let conn = Connection::plaintext(&cfg.bootstrap);
    let producer: ThreadedProducer<AckContext<Box<(u64, u64)>>> = conn.producer(
        &[
            ("linger.ms", "5"),
            ("batch.num.messages", "10000"),
            ("queue.buffering.max.messages", "200000"),
            ("message.timeout.ms", "30000"),
        ],
        AckContext::new(acks.clone()),
    )?;
    let reader = Reader::spawn(consumer_at_end(&conn, cfg, &parts)?, cfg.consumer_limit);
    let load = send_at_rate(cfg, &producer, &parts, size, rate, &acks, &reader.consumed)?;
    // Let what was sent arrive, so the next trial starts clean.
    let _ = producer.flush(Duration::from_secs(30));
    let e2e = reader.drain(&acks)?;
    Ok(judge(cfg, size, rate, &load, &acks, &e2e))
}

/// A consumer of the topic, starting at the end of every partition.
fn consumer_at_end(conn: &Connection, cfg: &ProbeConfig, parts: &[i32]) -> Result<BaseConsumer<AuthContext>> {
    let consumer: BaseConsumer<AuthContext> = conn.reader(
        "a Kafka consumer",
        &[("group.id", "flexrun-capacity"), ("enable.auto.commit", "false"), ("fetch.wait.max.ms", "10")],
    )?;
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        let (_, high) = consumer
            .fetch_watermarks(&cfg.topic, *p, Duration::from_secs(10))
            .map_err(|e| anyhow!("reading the end of {}/{p}: {e}", cfg.topic))?;
        tpl.add_partition_offset(&cfg.topic, *p, Offset::Offset(high)).map_err(|e| anyhow!("{e}"))?;
    }
    consumer.assign(&tpl).map_err(|e| anyhow!("assigning {}: {e}", cfg.topic))?;
    Ok(consumer)
}

/// The trial's consumer on its own thread: it counts what it reads and records each
/// message's end-to-end latency (the send time is the payload's first 8 bytes).
struct Reader {
    stop: Arc<AtomicBool>,
    consumed: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Histogram<u64>>,
}

impl Reader {
    /// Start reading, at most `limit` messages/s when set.
    fn spawn(consumer: BaseConsumer<AuthContext>, limit: Option<f64>) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let consumed = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, consumed) = (stop.clone(), consumed.clone());
            std::thread::spawn(move || {
                let mut e2e = histogram();
                let began = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if limit
                        .is_some_and(|l| consumed.load(Ordering::Relaxed) as f64 >= began.elapsed().as_secs_f64() * l)
                    {
                        std::thread::sleep(Duration::from_micros(500));
                        continue;
                    }
                    if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                        if let Some(p) = m.payload().filter(|p| p.len() >= 8) {
                            let sent = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
                            let _ = e2e.record(now_us().saturating_sub(sent).max(1));
                        }
                        consumed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                e2e
            })
        };
        Reader { stop, consumed, thread }
    }

    /// Wait (up to 10 s) until it has read all that was acknowledged, stop it, and
    /// return its end-to-end latencies.
    fn drain(self, acks: &Acks) -> Result<Histogram<u64>> {
        let drain_until = Instant::now() + Duration::from_secs(10);
        while self.consumed.load(Ordering::Relaxed) < acks.ok.load(Ordering::Relaxed) && Instant::now() < drain_until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow!("the consumer thread panicked"))
    }
}

/// What the sending phase of a trial saw.
struct Load {
    /// Seconds it ran.
    window: f64,
    /// Messages acknowledged by its end.
    acked: u64,
    /// Messages consumed by its end.
    consumed: u64,
    /// Acknowledged but not yet consumed at its end.
    lag_end: f64,
    /// The same at half-way.
    lag_mid: Option<f64>,
    /// (seconds, messages acknowledged) at half-way.
    acked_mid: Option<(f64, u64)>,
    /// The sender fell more than half a second behind its schedule.
    behind: bool,
}

/// Send `size`-byte messages at `rate` per second, round-robin over `parts`, for the
/// trial's length; each payload starts with its send time.
fn send_at_rate(
    cfg: &ProbeConfig,
    producer: &ThreadedProducer<AckContext<Box<(u64, u64)>>>,
    parts: &[i32],
    size: usize,
    rate: f64,
    acks: &Acks,
    consumed: &AtomicU64,
) -> Result<Load> {
    let mut payload = vec![b'x'; size.max(8)];
    let start = Instant::now();
    let trial_s = cfg.trial.as_secs_f64();
    let (mut sent, mut next) = (0u64, 0usize);
    let mut lag_mid: Option<f64> = None;
    let mut acked_mid: Option<(f64, u64)> = None;
    let mut behind = false;
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed >= trial_s {
            break;
        }
        if lag_mid.is_none() && elapsed >= trial_s / 2.0 {
            let acked = acks.ok.load(Ordering::Relaxed);
            lag_mid = Some(acked as f64 - consumed.load(Ordering::Relaxed) as f64);
            acked_mid = Some((elapsed, acked));
        }
        let due = (elapsed * rate).floor() as u64 + 1;
        if sent >= due {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        if (due - sent) as f64 > rate * 0.5 {
            behind = true; // more than half a second behind: the sender cannot keep up
        }
        payload[..8].copy_from_slice(&now_us().to_le_bytes());
        let rec = BaseRecord::with_opaque_to(&cfg.topic, Box::new((now_us(), 0)))
            .payload(&payload[..])
            .partition(parts[next % parts.len()]);
        next += 1;
        match producer.send::<[u8], [u8]>(rec) {
            Ok(()) => sent += 1,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err((e, _)) => return Err(anyhow!("producing to {}: {e}", cfg.topic)),
        }
    }
    let window = start.elapsed().as_secs_f64();
    let acked = acks.ok.load(Ordering::Relaxed);
    let lag_end = acked as f64 - consumed.load(Ordering::Relaxed) as f64;
    let consumed = consumed.load(Ordering::Relaxed);
    Ok(Load { window, acked, consumed, lag_end, lag_mid, acked_mid, behind })
}

/// The trial's verdict and measurements: the first indicator that trips (in the order
/// the module's documentation lists them) names the failure.
fn judge(
    cfg: &ProbeConfig,
    size: usize,
    rate: f64,
    load: &Load,
    acks: &Acks,
    e2e: &Histogram<u64>,
) -> (Trial, TrialDetail) {
    let produce = acks.latency_us.lock().expect("lock").clone();
    let p99 = |h: &Histogram<u64>| crate::stats::quantile_ms(h, 0.99);
    // The rate over the second half: connection set-up in the first does not count.
    let achieved = match load.acked_mid {
        Some((t, n)) if load.window > t => (load.acked - n) as f64 / (load.window - t),
        _ => load.acked as f64 / load.window,
    };
    let lag_growth = load.lag_end - load.lag_mid.unwrap_or(0.0);
    let limit_ms = cfg.p99_limit.as_secs_f64() * 1000.0;
    let tripped = if achieved < cfg.achieved_ratio * rate || load.behind || acks.failed.load(Ordering::Relaxed) > 0 {
        Some(format!("achieved rate below offered ({achieved:.0} of {rate:.0} msg/s acknowledged)"))
    } else if p99(&produce) > limit_ms {
        Some(format!("p99 produce latency {:.0} ms > {limit_ms:.0} ms", p99(&produce)))
    } else if lag_growth > cfg.lag_growth_limit_s * rate {
        Some(format!("consumer lag growing (+{lag_growth:.0} messages over the second half)"))
    } else if p99(e2e) > limit_ms {
        Some(format!("p99 end-to-end latency {:.0} ms > {limit_ms:.0} ms", p99(e2e)))
    } else {
        None
    };
    let detail = TrialDetail {
        message_bytes: size,
        offered: rate,
        achieved,
        consumed: load.consumed as f64 / load.window,
        produce_p99_ms: p99(&produce),
        end_to_end_p99_ms: p99(e2e),
        lag_growth,
        tripped: tripped.clone(),
    };
    tracing::info!(
        size,
        offered = rate as u64,
        achieved = achieved as u64,
        produce_p99_ms = detail.produce_p99_ms,
        e2e_p99_ms = detail.end_to_end_p99_ms,
        lag_growth = lag_growth as i64,
        tripped = tripped.as_deref().unwrap_or("-"),
        "capacity trial"
    );
    (Trial { offered: rate, achieved, tripped }, detail)
}
