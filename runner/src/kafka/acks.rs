//! [`AckContext`]: the one producer context. librdkafka calls it once per message with
//! the broker's answer; it counts acknowledgements and failures, keeps the first
//! failure, and, when the message carries its times ([`Timing`]), records
//! creation → acknowledgement and read → acknowledgement latencies.

use hdrhistogram::Histogram;
use rdkafka::message::Message as _;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::util::IntoOpaque;
use rdkafka::ClientContext;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a message's delivery opaque says about its times, µs since the epoch.
pub trait Timing: IntoOpaque {
    /// (created, read by the job); 0 when not known.
    fn times(&self) -> (u64, u64);
}

impl Timing for () {
    fn times(&self) -> (u64, u64) {
        (0, 0)
    }
}

impl Timing for Box<(u64, u64)> {
    fn times(&self) -> (u64, u64) {
        **self
    }
}

/// Delivery counters and latencies.
pub struct Acks {
    /// Acknowledged by the broker.
    pub ok: AtomicU64,
    /// Failed after librdkafka's retries.
    pub failed: AtomicU64,
    /// The first failure.
    pub first_error: Mutex<Option<String>>,
    /// Creation → acknowledgement, µs.
    pub latency_us: Mutex<Histogram<u64>>,
    /// Read by the job → acknowledgement, µs (when the message carries a read time).
    pub in_job_us: Mutex<Histogram<u64>>,
}

impl Acks {
    /// Empty counters.
    pub fn new() -> Arc<Acks> {
        let h = || Mutex::new(crate::stats::histogram());
        Arc::new(Acks {
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
            latency_us: h(),
            in_job_us: h(),
        })
    }

    /// Messages answered so far (acknowledged or failed).
    pub fn answered(&self) -> u64 {
        self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed)
    }
}

/// A producer context that fills [`Acks`]; `T` is the per-message opaque: `()` when
/// only counting, `Box<(created_us, read_us)>` when timing.
pub struct AckContext<T: Timing = ()> {
    /// The counters it fills.
    pub acks: Arc<Acks>,
    _t: PhantomData<fn(T)>,
}

impl<T: Timing> AckContext<T> {
    /// A context that fills `acks`.
    pub fn new(acks: Arc<Acks>) -> AckContext<T> {
        AckContext { acks, _t: PhantomData }
    }
}

impl<T: Timing> ClientContext for AckContext<T> {}

impl<T: Timing + Send + Sync> ProducerContext for AckContext<T> {
    type DeliveryOpaque = T;
    fn delivery(&self, r: &DeliveryResult<'_>, opaque: T) {
        match r {
            Ok(_) => {
                self.acks.ok.fetch_add(1, Ordering::Relaxed);
                let (created, read) = opaque.times();
                if created > 0 {
                    let now = now_us();
                    crate::stats::record_us(
                        &mut self.acks.latency_us.lock().expect("lock"),
                        now.saturating_sub(created),
                    );
                    if read > 0 {
                        crate::stats::record_us(
                            &mut self.acks.in_job_us.lock().expect("lock"),
                            now.saturating_sub(read),
                        );
                    }
                }
            }
            Err((e, m)) => {
                self.acks.failed.fetch_add(1, Ordering::Relaxed);
                let mut g = self.acks.first_error.lock().expect("lock");
                g.get_or_insert_with(|| format!("partition {}: {e}", m.partition()));
            }
        }
    }
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}
