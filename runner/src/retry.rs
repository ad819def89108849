//! The one retry policy every remote call uses: capped exponential backoff, with
//! optional jitter and an optional attempt limit, and a wait that a stop interrupts.
//!
//! The BigQuery append target, the Schema Registry client, the Cloud Storage store and
//! kafka-to-gcs's readers each loop over their own calls (they classify errors differently), but all of them
//! take their waits from a [`Backoff`] here, so the schedule is written once.
//!
//! ```
//! use flexrun::retry::Backoff;
//! use std::time::Duration;
//! let b = Backoff::STORAGE_OPEN;
//! assert_eq!(b.delay(1), Some(Duration::from_millis(50)));
//! assert_eq!(b.delay(3), Some(Duration::from_millis(200)));
//! assert_eq!(b.delay(6), None, "six attempts in all: no wait after the sixth");
//! assert!(Backoff::STORAGE.delay(1_000).is_some(), "a running job's calls never give up");
//! ```

use rand::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The remote services flexrun retries, as labelled in `/metrics`
/// (`job_reliability_events{event="retries_<service>"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// BigQuery's Storage Write API.
    BigQuery,
    /// The Schema Registry.
    Registry,
    /// Cloud Storage.
    Storage,
    /// The Kafka broker (consumer errors waited out).
    Broker,
}

impl Service {
    const ALL: [Service; 4] = [Service::BigQuery, Service::Registry, Service::Storage, Service::Broker];

    fn name(self) -> &'static str {
        match self {
            Service::BigQuery => "bigquery",
            Service::Registry => "registry",
            Service::Storage => "storage",
            Service::Broker => "broker",
        }
    }
}

static RETRIES: [AtomicU64; 4] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Count one retry of a call to `s` (process-wide: one process runs one job).
pub fn note_retry(s: Service) {
    RETRIES[s as usize].fetch_add(1, Ordering::Relaxed);
}

/// Retries so far by service, as `/metrics` events (`retries_bigquery`, ...).
///
/// ```
/// use flexrun::retry::{note_retry, retries, Service};
/// let before = retries()["retries_registry"];
/// note_retry(Service::Registry);
/// assert_eq!(retries()["retries_registry"], before + 1);
/// ```
pub fn retries() -> BTreeMap<String, u64> {
    Service::ALL
        .iter()
        .map(|s| (format!("retries_{}", s.name()), RETRIES[*s as usize].load(Ordering::Relaxed)))
        .collect()
}

/// How much of each delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Exactly the exponential delay.
    None,
    /// Uniformly between half the delay and the whole of it, so that many clients that
    /// failed together do not retry together.
    Half,
}

/// A retry schedule: the wait before retry `n` is `first × 2^(n-1)`, capped at `cap`,
/// then jittered; with `attempts`, no retry follows the last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub first: Duration,
    /// The longest wait.
    pub cap: Duration,
    /// Randomisation of each wait.
    pub jitter: Jitter,
    /// Attempts in all (the first call included), or `None` for no limit: the caller
    /// waits out the outage, as a streaming job must.
    pub attempts: Option<u32>,
}

impl Backoff {
    /// BigQuery's Storage Write API: jittered, no attempt limit (a quota episode or an
    /// outage stalls the job instead of ending it), at most 10 s apart.
    pub const BIGQUERY: Backoff = Backoff {
        first: Duration::from_millis(500),
        cap: Duration::from_secs(10),
        jitter: Jitter::Half,
        attempts: None,
    };
    /// The Schema Registry: jittered, no attempt limit (the batch waits), at most 10 s apart.
    pub const REGISTRY: Backoff = Backoff {
        first: Duration::from_millis(200),
        cap: Duration::from_secs(10),
        jitter: Jitter::Half,
        attempts: None,
    };
    /// Cloud Storage, once the bucket is known to exist: jittered, no attempt limit (Google's
    /// retry strategy: "exponential backoff with jitter"; a job waits out an outage),
    /// 50 ms doubling to at most 10 s.
    pub const STORAGE: Backoff = Backoff {
        first: Duration::from_millis(50),
        cap: Duration::from_secs(10),
        jitter: Jitter::Half,
        attempts: None,
    };
    /// Cloud Storage when a job opens its bucket: six attempts, so that a wrong endpoint
    /// or bucket ends the run with its reason instead of waiting for ever.
    pub const STORAGE_OPEN: Backoff = Backoff { attempts: Some(6), jitter: Jitter::None, ..Backoff::STORAGE };
    /// The Kafka consumer's errors (librdkafka reconnects by itself; the reader waits
    /// between errors so that a broker outage does not spin): no attempt limit, at
    /// most 5 s apart.
    pub const BROKER: Backoff = Backoff {
        first: Duration::from_millis(100),
        cap: Duration::from_secs(5),
        jitter: Jitter::Half,
        attempts: None,
    };

    /// The wait before retry `attempt` (1-based: after the first call failed), or `None`
    /// when `attempt` was the last one allowed.
    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        if self.attempts.is_some_and(|n| attempt >= n) {
            return None;
        }
        let exp = self.first.saturating_mul(1u32 << attempt.saturating_sub(1).min(16)).min(self.cap);
        Some(match self.jitter {
            Jitter::None => exp,
            Jitter::Half => exp.mul_f64(rand::rng().random_range(0.5..=1.0)),
        })
    }
}

/// Sleep for `delay`, unless `stop` is or becomes true first: then `false` (the caller
/// gives up its retry), else `true`.
pub async fn wait_unless_stopped(delay: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = stop.changed() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_jitter_stays_within_half() {
        let b = Backoff { jitter: Jitter::None, ..Backoff::BIGQUERY };
        let ms: Vec<u128> = (1..=7).map(|n| b.delay(n).unwrap().as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(b.delay(10_000), Some(Duration::from_secs(10)), "a long outage neither overflows nor ends");
        for n in 1..=8 {
            let exp = b.delay(n).unwrap();
            let j = Backoff::BIGQUERY.delay(n).unwrap();
            assert!(j >= exp / 2 && j <= exp, "attempt {n}: {j:?} not within [{:?}, {exp:?}]", exp / 2);
        }
    }

    #[test]
    fn a_limited_schedule_ends_after_its_last_attempt() {
        let waits: Vec<_> = (1..=7).map(|n| Backoff::STORAGE_OPEN.delay(n)).collect();
        let ms: Vec<u64> = waits.iter().flatten().map(|d| d.as_millis() as u64).collect();
        assert_eq!(ms, [50, 100, 200, 400, 800], "five waits between six attempts");
        assert_eq!(waits[5], None);
        let late = Backoff::REGISTRY.delay(1_000).unwrap();
        assert!(late >= Duration::from_secs(5) && late <= Duration::from_secs(10), "{late:?}");
    }

    #[tokio::test]
    async fn a_stop_ends_the_wait() {
        let (tx, mut rx) = watch::channel(false);
        tx.send(true).unwrap();
        assert!(!wait_unless_stopped(Duration::from_secs(3600), &mut rx).await);
        let (_tx, mut rx) = watch::channel(false);
        assert!(wait_unless_stopped(Duration::from_millis(1), &mut rx).await);
    }
}
